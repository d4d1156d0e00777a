"""A run's record and lease in its store, so that another machine can recover it from there.

The store holds a small record of every run (:mod:`nodus.store.run_records`): written once at
acceptance, then by the runner that drives the run after each change of phase, stage or attempt
(rare events: never from the capture loop). :func:`record_of` builds it from the catalog, and
:mod:`nodus.runner.remote.adoption` builds catalog rows back from it on a machine that never saw the
run.

While a runner drives a run it holds the run's lease in the store (:class:`StoreDriving`),
next to the local :class:`~nodus.runner.catalog.locks.RunLock`: the lock keeps two runners of one
``$NODUS_HOME`` apart, the lease two machines sharing a store. The lease is renewed in the
background every third of its duration. The record names the lease token of the runner that
wrote it, so the commit guard can fence across machines: an attempt may commit only while its
runner still holds the lease, no newer attempt of its stage is in the record, and an attempt of
the same number in the record is its own.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from nodus.errors import StaleAttemptError, StoreError
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.remote import adoption
from nodus.runner.remote.adoption import record_of
from nodus.schemas import defaults
from nodus.store.run_records import Lease, Leases, RunRecords

if TYPE_CHECKING:
    from nodus.store import SnapshotStore

RECORD_QUIET_S = 0.05
RECORD_QUIET_MAX_S = 1.0
"""A run's record in the store is written once its catalog has had no change for
``RECORD_QUIET_S`` (a burst of changes is one write, after it), and at most
``RECORD_QUIET_MAX_S`` after the first change it shows."""

RUN_LEASE_S = 60.0
"""How long a runner's lease on a run (``leases/<run>.json`` in the store) lasts unless renewed;
the runner renews it every third of that. A machine that lost its runner without a trace holds
the run this long at most before another machine may take it over."""


def publish_accepted(catalog: Catalog, store: SnapshotStore, run_id: str) -> None:
    """Write a newly accepted run's record (and its key's index entry) into its store."""
    run = catalog.get_run(run_id)
    records = RunRecords(store.storage)
    records.write(record_of(run, None))
    if run.key is not None:
        records.write_key(run.key, run.id)


class StoreDriving:
    """Held by the runner while it drives a run: the lease, the record mirror, the fence.

    ``with StoreDriving(catalog, store, run) as driving:`` takes the lease (or raises
    AlreadyRunningError naming its holder) and brings the catalog up to date when the store's
    record is ahead of it (``driving.run``); leaving gives the lease back.
    """

    def __init__(self, catalog: Catalog, store: SnapshotStore, run: Run) -> None:
        self.catalog = catalog
        self.run = run
        self._store = store
        self._records = RunRecords(store.storage)
        self._leases = Leases(
            store.storage,
            duration_s=RUN_LEASE_S,
            settle_s=defaults.run_lease_settle_s(),
        )
        self._lease: Lease | None = None
        self._lost = False
        self._writing = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._dirty = threading.Event()  # wakes the mirror: a change, or the end of the drive
        self._pending = False  # a change the record does not show yet
        self._last_change = 0.0  # when the newest change came (monotonic)
        self._mirror: threading.Thread | None = None
        self._unhook: list[Callable[[], None]] = []

    def __enter__(self) -> StoreDriving:
        self._lease = self._leases.take(self.run.id)
        try:
            self.run = adoption.refresh(self.catalog, self._store, self._records, self.run)
            self._write_record()
        except BaseException:
            self._leases.release(self.run.id, self._lease)
            raise
        self._unhook = [self.catalog.observe(self._changed), self.catalog.add_fence(self._fence)]
        self._renewer = threading.Thread(target=self._renew, name="nodus-lease", daemon=True)
        self._renewer.start()
        self._mirror = threading.Thread(target=self._mirror_changes, name="nodus-record")
        self._mirror.daemon = True
        self._mirror.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._dirty.set()  # wakes the mirror, which ends
        for thread in (self._renewer, self._mirror):
            if thread is not None:
                thread.join()
        for unhook in self._unhook:
            unhook()
        if self._pending:  # a change after the mirror's last write: the record ends up to date
            self._pending = False
            self._write_if_held()
        assert self._lease is not None
        with contextlib.suppress(StoreError, OSError):  # it expires on its own
            self._leases.release(self.run.id, self._lease)

    # --- the record -------------------------------------------------------------------------

    def _changed(self, run_id: str) -> None:
        """A change of the run: the mirror thread writes the record, off the drive's path.

        Each write is two fsyncs; on the path from a kill to the next attempt's program they
        were most of the runner's own time. A record that lags by milliseconds fences nothing
        wrongly: the fence reads what *other* runners wrote, and leaving the drive writes the
        last change before the lease is given back.
        """
        if run_id == self.run.id:
            self._last_change = time.monotonic()
            self._pending = True
            self._dirty.set()  # wakes nothing while the mirror awaits quiet (on ``_stop``)

    def _mirror_changes(self) -> None:
        while True:
            self._dirty.wait()
            self._await_quiet()
            self._dirty.clear()
            if self._pending:  # the write reads the catalog then: it holds every change so far
                self._pending = False
                self._write_if_held()
            if self._stop.is_set():
                return

    def _await_quiet(self) -> None:
        """Wait out a burst of changes (an attempt ends, a recovery's next one starts): the
        record is written once, after it, and the mirror is not woken within it. Built and
        written in the burst, it held the interpreter lock the next attempt's start was
        waiting for (a millisecond and more).
        """
        latest = time.monotonic() + RECORD_QUIET_MAX_S
        while not self._stop.is_set():
            due = min(self._last_change + RECORD_QUIET_S, latest)
            left = due - time.monotonic()
            if left <= 0:
                return
            self._stop.wait(left)

    def _write_if_held(self) -> None:
        run_id = self.run.id
        if self._lost:
            return
        try:
            assert self._lease is not None  # taken in __enter__, before this observer is added
            if not self._leases.holds(run_id, self._lease):
                self._lose("its lease was taken over")
                return
            self._write_record()
        except Exception as error:  # a mirror: no failure of it stops a drive
            # Out of reach, or an error of the store's client: the next change writes it all.
            self.catalog.add_event(run_id, "run_record_failed", {"error": str(error)})

    def _write_record(self) -> None:
        assert self._lease is not None
        with self._writing:
            run = self.catalog.get_run(self.run.id)
            self._records.write(record_of(run, self._lease.token))

    # --- the lease --------------------------------------------------------------------------

    def _renew(self) -> None:
        assert self._lease is not None
        while not self._stop.wait(self._leases.duration_s / 3):
            try:
                renewed = self._leases.renew(self.run.id, self._lease)
            except Exception:  # this thread must live as long as the drive
                continue  # out of reach: try again; the fence holds if it expires meanwhile
            if renewed is None:
                self._lose("its lease was taken over")
                return
            self._lease = renewed

    def _lose(self, why: str) -> None:
        if not self._lost:
            self._lost = True
            holder = self._leases.read(self.run.id)
            by = holder.holder if holder is not None else "nobody"
            self.catalog.add_event(self.run.id, "lease_lost", {"why": why, "holder": by})

    # --- the fence --------------------------------------------------------------------------

    def _fence(self, run_id: str, stage: str, attempt: int) -> None:
        """Refuse the commit of an attempt another machine has superseded."""
        if run_id != self.run.id:
            return
        assert self._lease is not None
        if self._lost:
            raise StaleAttemptError(
                f"attempt {attempt} of {run_id}/{stage} lost the run's lease in the store to "
                "another runner; its snapshot is not committed"
            )
        record = self._records.read(run_id)
        if record is None:
            return
        newest = max(
            (a["number"] for s in record["stages"] if s["name"] == stage for a in s["attempts"]),
            default=0,
        )
        if newest > attempt or (newest == attempt and record.get("driver") != self._lease.token):
            raise StaleAttemptError(
                f"attempt {attempt} of {run_id}/{stage} was superseded in the store by another "
                f"runner's attempt {newest}; its snapshot is not committed"
            )
