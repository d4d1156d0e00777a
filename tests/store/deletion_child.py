"""A deleting process for the deletion tests: runs one operation on a store, or loops gc.

Usage: deletion_child.py STORE OP [ARGS]

- ``delete_kind ID``: deletes every kind of snapshot ID, one at a time (the last one removes it);
- ``delete ID``: deletes snapshot ID whole;
- ``finish``: finishes the deletions left pending, as ``nodus gc`` does;
- ``gc-loop STOP ID...``: until the file STOP exists, deletes kinds of the snapshots ID... and
  runs finish_deletions + gc_blobs(0), as a gc from cron beside running captures; prints how
  many sweeps it made and how many it found deferred.

With ``NODUS_STORE_CRASH_AT`` set, the store ends this process at that point (status 137).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys

from nodus.errors import NotFoundError
from nodus.store import KINDS, deleting, open_store


def gc_loop(store, stop: str, victims: list[str]) -> None:
    deleting.SWEEP_RETRY_S = 0.05  # the test runs for seconds, not minutes
    rng = random.Random(os.getpid())
    swept = deferred = 0
    print("ready", flush=True)
    while not os.path.exists(stop):
        victim = rng.choice(victims)
        kind = rng.choice(KINDS)
        with contextlib.suppress(NotFoundError):  # the other gc removed it (its last kind went)
            store.delete_kind(victim, kind)
        for report in (store.finish_deletions(), store.gc_blobs(grace_s=0)):
            deferred += report.deferred
            swept += not report.deferred
    print("swept", swept, "deferred", deferred, flush=True)


def main() -> None:
    store_url, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    store = open_store(store_url)
    if op == "delete_kind":
        for kind in KINDS:
            store.delete_kind(args[0], kind)
    elif op == "delete":
        store.delete(args[0])
    elif op == "finish":
        store.finish_deletions()
    elif op == "gc-loop":
        gc_loop(store, args[0], args[1:])
    else:
        raise SystemExit(f"unknown operation {op!r}")


if __name__ == "__main__":
    main()
