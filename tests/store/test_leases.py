"""The run lease's fast path: on a local store a lease is created only where there is none.

Many takers racing for a run nobody holds: a link never replaces, so exactly one gets it, at
once (no settle time), and every other is refused naming the holder.
"""

from __future__ import annotations

import threading

from nodus.errors import AlreadyRunningError
from nodus.store.local_storage import LocalStorage
from nodus.store.run_records import Leases


def test_racers_for_a_free_run_on_a_local_store_end_with_exactly_one_holder(tmp_path):
    storage = LocalStorage("file://" + str(tmp_path), str(tmp_path))
    # A settle time longer than the test: only the create-if-absent path can finish in time.
    leases = Leases(storage, duration_s=60, settle_s=3600)
    won, refused = [], []
    start = threading.Barrier(8)

    def take() -> None:
        start.wait()
        try:
            won.append(leases.take("run_0123456789ab"))
        except AlreadyRunningError as error:
            refused.append(str(error))

    threads = [threading.Thread(target=take, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(won) == 1 and len(refused) == 7
    assert leases.holds("run_0123456789ab", won[0])
    assert all("already running elsewhere" in message for message in refused)
