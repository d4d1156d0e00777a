"""The run's record in the store follows the catalog without standing in the drive's way: a
burst of changes (an attempt ends, a recovery's next one starts) is one write after it, and the
last change is in the record before the drive gives its lease back.

Real store, real catalog, the drive's real mirror thread; the writes are counted at the
record's writer (a seam of ours), and the quiet time is measured on a clock the test moves (the
module's ``time``), so no assertion depends on how fast a loaded machine runs the burst.
"""

from __future__ import annotations

import time

from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.phases import Phase
from nodus.runner.remote import record
from nodus.runner.remote.record import StoreDriving
from nodus.schemas.loader import resolve_file
from nodus.store import open_store
from nodus.store.run_records import RunRecords
from polling import wait_for
from run_phases import move_to

WORKLOAD = 'name = "mirror"\ncommand = ["python", "-c", "pass"]\n'


def _run(tmp_path):
    (tmp_path / "workload.toml").write_text(WORKLOAD)
    url = f"file://{tmp_path / 'store'}"
    catalog = Catalog(str(tmp_path / "home"))
    run_id = catalog.create_run(
        name="mirror",
        workload=resolve_file(tmp_path / "workload.toml").to_dict(),
        store=url,
        key=None,
        lock_name="mirror",
        stage_names=["main"],
    )
    return catalog, open_store(url), run_id


def _counting_writes(driving: StoreDriving) -> list[str]:
    phases: list[str] = []
    write = driving._records.write

    def counted(record: dict) -> None:
        write(record)
        phases.append(record["phase"])  # after the write: a test waiting on it reads the record

    driving._records.write = counted
    return phases


class _Clock:
    """``time`` as the record module sees it, with a monotonic clock that moves when told."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_burst_of_changes_is_written_once_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "RECORD_QUIET_S", 0.5)
    monkeypatch.setattr(record, "RECORD_QUIET_MAX_S", 10.0)
    clock = _Clock()
    monkeypatch.setattr(record, "time", clock)
    catalog, store, run_id = _run(tmp_path)
    with StoreDriving(catalog, store, catalog.get_run(run_id)) as driving:
        written = _counting_writes(driving)
        # A burst as a recovery makes it: changes within the quiet time (the clock stands).
        for phase in (Phase.PREPARING, Phase.RUNNING, Phase.RECOVERING, Phase.RUNNING):
            catalog.lifecycle.move(run_id, phase, stage="main")
            clock.now += record.RECORD_QUIET_S / 10
        assert written == []  # within the quiet time nothing is written, however long it takes
        clock.now += record.RECORD_QUIET_S  # quiet since the last change
        wait_for(lambda: written, "the record written after the burst")
        assert RunRecords(store.storage).read(run_id)["phase"] == Phase.RUNNING
    # The drive ended (its mirror joined, a pending change written): one write in all.
    assert written == [Phase.RUNNING]


def test_the_last_change_is_in_the_record_when_the_drive_ends(tmp_path):
    catalog, store, run_id = _run(tmp_path)
    with StoreDriving(catalog, store, catalog.get_run(run_id)):
        move_to(catalog, run_id, Phase.RUNNING, stage="main")
        catalog.lifecycle.move(run_id, Phase.RECOVERING, stage="main")  # left within the quiet wait
    assert RunRecords(store.storage).read(run_id)["phase"] == Phase.RECOVERING
