"""The blob sweep: garbage collection that is safe against captures, and other sweeps, at once.

Mark: every blob named by a committed manifest, leaving out kinds whose deletion has begun.
Sweep: delete unmarked blobs older than a grace period. A capture may reuse a blob it found
already stored, so a sweep and a capture exclude each other with flags, in the manner of
Dekker's algorithm, which needs nothing from the storage but read-after-write consistency:

- a capture writes its intent (``intents/<id>.json``) first, then waits while any sweep lock
  (``locks/sweep-<token>.json``) is live, and only then looks at which blobs exist;
- a sweep writes its own lock first, then looks for intents and for other sweeps' locks; if a
  capture or another sweep is live it sweeps nothing (the report says it was deferred) and
  releases its lock.

Whichever writes second sees the other, so no capture trusts a blob a sweep may delete, and
two sweeps never run at once (they would not harm each other, but a sweep that ended would
otherwise look like the end of the other's). Each flag names its owner (see
:mod:`nodus.store.owners`): a flag whose owner is known to be gone (killed, on this machine) is
ignored at once; any other abandoned flag expires after its lease, and a live holder renews its
flag before the lease runs out. A capture's intent (:class:`Intent`) is renewed by a thread of
its own, so one long step of the capture or upload (a huge file, a slow link) never lets it
lapse: a sweep that then found it expired would free blobs the capture found stored and is
about to name (the outputs of a Trainer's folder, missing blobs of the checkpoints rotated).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from nodus._logging import Logger
from nodus.store import keys
from nodus.store._faults import crash_point
from nodus.store.owners import gone, me
from nodus.store.storage import Storage

__all__ = [
    "GcReport",
    "Intent",
    "Sweep",
    "sweep",
    "unreferenced",
    "wait_for_sweep",
    "write_intent",
]

log = Logger("nodus.store")

SWEEP_LEASE_S = 600.0
"""A blob sweep's lock counts as abandoned (a killed GC) once this old; a live sweep renews it."""

SWEEP_WAIT_POLL_S = 0.1
"""How often a capture that found a sweep running looks again (and a deferred sweep retries)."""

CAPTURE_LEASE_S = 600.0
"""A capture's intent counts as abandoned (a killed capture) once this old; a live capture
renews it, so blob GC never sweeps blobs a running capture may still name."""


@dataclass
class GcReport:
    """What a deletion or a sweep did; ``deferred`` means a capture or another gc was running
    and no blob was swept (the deletions it left unfinished stay marked ``deleting``)."""

    deleted_blobs: int = 0
    freed_bytes: int = 0
    kept_blobs: int = 0
    removed_leftovers: int = 0  # abandoned temp files, intents and sweep locks
    deferred: bool = False
    reason: str = ""
    deleted: list[str] = field(default_factory=list)  # keys of the deleted blobs
    finished_deletions: int = 0  # kinds whose deletion was completed (marked ``deleted``)
    removed_snapshots: int = 0  # manifests removed: whole snapshots, or ones with no kind left
    removed_records: int = 0  # tombstones and hold records of snapshots that no longer exist
    pending_deletions: int = 0  # kinds left marked ``deleting`` (the sweep was deferred)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def add(self, other: GcReport) -> GcReport:
        """Fold ``other`` (a later step of the same gc) into this report; returns this one."""
        for name in (f.name for f in fields(self)):
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "reason":
                self.reason = theirs or mine
            elif isinstance(mine, bool):
                setattr(self, name, mine or theirs)
            else:
                setattr(self, name, mine + theirs)
        return self


def sweep(
    storage: Storage,
    held: Callable[[], set[str]],
    candidates: dict[str, int] | None,
    min_age_s: float,
    retry_s: float = 0.0,
) -> GcReport:
    """Delete the blobs that ``held()`` (the mark, taken under the lock) leaves out: only the
    ``candidates`` (digest -> size) when given, else every one older than ``min_age_s``. A sweep
    deferred by a capture or another gc is retried for up to ``retry_s``."""
    deadline = time.monotonic() + retry_s
    while True:
        report = _sweep_once(storage, held, candidates, min_age_s)
        if not report.deferred or time.monotonic() >= deadline:
            return report
        import random  # here: only a deferred sweep waits, and every command imports this

        # Jittered, so two gc processes that deferred to each other do not retry in step.
        time.sleep(random.uniform(0.5, 1.5) * SWEEP_WAIT_POLL_S)


def unreferenced(
    storage: Storage, held: set[str], min_age_s: float
) -> tuple[list[tuple[str, int]], int]:
    """(key, size) of the blobs not ``held`` and older than ``min_age_s``; how many stay."""
    now = time.time()
    doomed, kept = [], 0
    for info in storage.list(keys.BLOBS):
        digest = keys.hash_of_blob_key(info.key)
        if digest is None:
            continue
        if digest in held or now - info.modified < min_age_s:
            kept += 1
        else:
            doomed.append((info.key, info.size))
    return doomed, kept


def _sweep_once(
    storage: Storage,
    held: Callable[[], set[str]],
    candidates: dict[str, int] | None,
    min_age_s: float,
) -> GcReport:
    with Sweep(storage) as current:
        if not current.allowed:
            log.info("store: blob sweep deferred: %s", current.report.reason)
            return current.report
        marked = held()  # under the lock: no capture can commit a blob it trusts meanwhile
        if candidates is None:
            doomed, current.report.kept_blobs = unreferenced(storage, marked, min_age_s)
        else:
            unheld = sorted(set(candidates) - marked)
            keyed = ((keys.blob_key(digest), candidates[digest]) for digest in unheld)
            doomed = [(key, size) for key, size in keyed if storage.exists(key)]
            current.report.kept_blobs = len(candidates) - len(unheld)
        current.delete_blobs(doomed)
        if candidates is None:
            current.remove_leftovers(max(min_age_s, CAPTURE_LEASE_S))
        return current.report


def write_intent(storage: Storage, snapshot_id: str) -> float:
    """Announce a capture; returns when it was written (renew before the lease runs out)."""
    now = time.time()
    record = {"written": now, "owner": me()}
    storage.write(keys.intent_key(snapshot_id), json.dumps(record).encode())
    return now


class Intent:
    """A capture's (or an upload's) intent, kept live for as long as its work runs.

    A sweep spares the blobs a capture may name only while the capture's intent is live, and
    one step of the work (copying a huge file, uploading a snapshot over a slow link) can take
    longer than the lease: so a thread renews the intent every quarter lease, whatever the work
    is doing. ``write()`` it first (the caller may retry), then ``start()`` the renewals and
    ``close()`` at the end (deletes it). Before the commit, ``held_throughout()`` says whether
    the intent stayed live all along; when renewals failed for half a lease (the store out of
    reach) a sweep may have run meanwhile, so the caller calls ``reassert()`` (write it, wait
    out any live sweep) and checks again that every blob it names is stored.
    """

    def __init__(self, storage: Storage, snapshot_id: str) -> None:
        self.storage = storage
        self.snapshot_id = snapshot_id
        self._lock = threading.Lock()
        self._written: float | None = None  # the "written" time of the last intent stored
        self._lapsed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self) -> None:
        """Write (or renew) the intent; raises when the store refuses it."""
        written = write_intent(self.storage, self.snapshot_id)
        with self._lock:
            if self._written is not None and self._gap(self._written):
                self._lapsed = True
            self._written = written

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._renew, name=f"intent-{self.snapshot_id}", daemon=True
        )
        self._thread.start()

    def held_throughout(self) -> bool:
        """True when no sweep can have started since the intent was first written."""
        with self._lock:
            return not self._lapsed and self._written is not None and not self._gap(self._written)

    def reassert(self) -> None:
        """After a lapse: live again, and no sweep running (sweeps from now on defer)."""
        self.write()
        with self._lock:
            self._lapsed = False
        wait_for_sweep(self.storage)

    def close(self) -> None:
        """Stop renewing and delete the intent (raises when the store refuses the delete)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.storage.delete(keys.intent_key(self.snapshot_id))

    def _renew(self) -> None:
        while not self._stop.wait(CAPTURE_LEASE_S / 4):
            try:
                self.write()
            except Exception as error:  # out of reach for now: the next tick tries again
                log.info("store: intent of %s not renewed: %s", self.snapshot_id, error)

    @staticmethod
    def _gap(written: float) -> bool:
        # Half a lease, not a whole one: a sweep on a clock a little ahead must not see it
        # expired either (renewals come every quarter lease, so this means two were missed).
        return time.time() - written > CAPTURE_LEASE_S / 2


def wait_for_sweep(storage: Storage) -> None:
    """Block while a live sweep holds a lock (call only after the intent is written)."""
    while _live_sweeps(storage):
        time.sleep(SWEEP_WAIT_POLL_S)


class Sweep:
    """One sweep under its lock: ``with Sweep(storage) as sweep: if sweep.allowed: ...``."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.allowed = False
        self.report = GcReport()
        self._key = keys.sweep_key(keys.new_sweep_token())
        self._renewed = 0.0

    def __enter__(self) -> Sweep:
        self._renew(force=True)
        others = _live_sweeps(self.storage, besides=self._key)
        live = self._live_intents()
        if others:
            self.report.deferred = True
            self.report.reason = f"another gc is sweeping ({', '.join(sorted(others))})"
        elif live:
            self.report.deferred = True
            self.report.reason = f"{len(live)} capture(s) running ({', '.join(sorted(live))})"
        self.allowed = not self.report.deferred
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.storage.delete(self._key)  # only this sweep's own lock: others keep theirs

    def delete_blobs(self, candidates: Iterable[tuple[str, int]]) -> None:
        """Delete these (key, size) blobs; only call when ``allowed``."""
        assert self.allowed, "sweeping without the lock"
        for key, size in candidates:
            self._renew()
            self.storage.delete(key)
            self.report.deleted_blobs += 1
            self.report.freed_bytes += size
            self.report.deleted.append(key)
            crash_point("sweep.blob-deleted")

    def remove_leftovers(self, older_than_s: float) -> None:
        """Abandoned intents, sweep locks and temp files (file:// keeps them in tmp/)."""
        now = time.time()
        for info in self.storage.list(keys.INTENTS) + self.storage.list(keys.TMP):
            is_intent = info.key.startswith(keys.INTENTS + "/")
            record = _read(self.storage, info.key) if is_intent else {}
            written = _number(record.get("written")) or info.modified
            if now - written > older_than_s or gone(record.get("owner")):
                self.storage.delete(info.key)
                self.report.removed_leftovers += 1
        for info in self.storage.list(keys.LOCKS):
            if (
                info.key != self._key
                and keys.sweep_of_key(info.key) is not None
                and _live_owner(_read(self.storage, info.key)) is None
            ):
                self.storage.delete(info.key)
                self.report.removed_leftovers += 1

    def _live_intents(self) -> list[str]:
        now = time.time()
        live = []
        for info in self.storage.list(keys.INTENTS):
            record = _read(self.storage, info.key)
            written = _number(record.get("written")) or info.modified
            if now - written < CAPTURE_LEASE_S and not gone(record.get("owner")):
                # Something else in intents/ is taken for a capture too: GC never guesses.
                live.append(keys.intent_of_key(info.key) or info.key)
        return live

    def _renew(self, force: bool = False) -> None:
        # A long sweep renews its lock so waiting captures do not take it for abandoned.
        now = time.time()
        if force or now - self._renewed > SWEEP_LEASE_S / 4:
            record = {"until": now + SWEEP_LEASE_S, "owner": me()}
            self.storage.write(self._key, json.dumps(record).encode())
            self._renewed = now


def _live_sweeps(storage: Storage, besides: str | None = None) -> list[str]:
    """Who holds each live sweep lock (other than ``besides``), for waiting and for reports."""
    found = []
    for info in storage.list(keys.LOCKS):
        if info.key != besides and keys.sweep_of_key(info.key) is not None:
            holder = _live_owner(_read(storage, info.key))
            if holder is not None:
                found.append(holder)
    return found


def _live_owner(record: dict[str, Any]) -> str | None:
    """The holder of a sweep lock record, as words; None when the lock is not live."""
    until, owner = _number(record.get("until")), record.get("owner")
    if until is None or until < time.time() or gone(owner):
        return None
    if not isinstance(owner, dict) or owner.get("pid") is None:
        return "a process that did not say which"
    here = owner.get("machine") is not None and owner.get("machine") == me()["machine"]
    return f"pid {owner['pid']}" + ("" if here else " on another machine")


def _read(storage: Storage, key: str) -> dict[str, Any]:
    """A flag's JSON record; {} when it is gone or unreadable (so it counts as abandoned)."""
    try:
        record = json.loads(storage.read(key))
    except FileNotFoundError:
        return {}
    except ValueError:
        log.warning("store: unreadable %s; treating it as abandoned", key)
        return {}
    return record if isinstance(record, dict) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
