"""Blob garbage collection that is safe against captures running at the same time.

Mark: every blob named by a committed manifest, leaving out kinds whose deletion has begun.
Sweep: delete unmarked blobs older than a grace period. A capture may reuse a blob it found
already stored, so a sweep and a capture exclude each other with two flags, in the manner of
Dekker's algorithm, which needs nothing from the storage but read-after-write consistency:

- a capture writes its intent (``intents/<id>.json``) first, then waits while a sweep lock
  (``locks/sweep.json``) is held, and only then looks at which blobs exist;
- a sweep writes the sweep lock first, then looks for intents; if any capture is live it
  sweeps nothing (the report says it was deferred) and releases the lock.

Whichever writes second sees the other. Abandoned flags (a killed process) expire after their
lease, and a live holder renews its flag before the lease runs out.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from nodus.schemas import defaults
from nodus.store import keys
from nodus.store.storage import Storage

__all__ = ["GcReport", "Sweep", "renew_intent", "wait_for_sweep", "write_intent"]

log = logging.getLogger("nodus.store")


@dataclass
class GcReport:
    """What a sweep did; ``deferred`` means a capture was running and nothing was swept."""

    deleted_blobs: int = 0
    freed_bytes: int = 0
    kept_blobs: int = 0
    removed_leftovers: int = 0  # abandoned temp files and intents
    deferred: bool = False
    reason: str = ""
    deleted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def write_intent(storage: Storage, snapshot_id: str) -> float:
    """Announce a capture; returns when it was written (renew before the lease runs out)."""
    now = time.time()
    storage.write(keys.intent_key(snapshot_id), json.dumps({"written": now}).encode())
    return now


def renew_intent(storage: Storage, snapshot_id: str, written: float) -> float:
    if time.time() - written < defaults.CAPTURE_LEASE_S / 4:
        return written
    return write_intent(storage, snapshot_id)


def wait_for_sweep(storage: Storage) -> None:
    """Block while a live sweep holds the lock (call only after the intent is written)."""
    while True:
        until = _read_time(storage, keys.sweep_key(), "until")
        if until is None or until < time.time():
            return
        time.sleep(defaults.SWEEP_WAIT_POLL_S)


class Sweep:
    """One sweep under the lock: ``with Sweep(storage) as sweep: if sweep.allowed: ...``."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.allowed = False
        self.report = GcReport()
        self._renewed = 0.0

    def __enter__(self) -> Sweep:
        self._renew(force=True)
        live = self._live_intents()
        if live:
            self.report.deferred = True
            self.report.reason = f"{len(live)} capture(s) running ({', '.join(sorted(live))})"
        self.allowed = not live
        return self

    def __exit__(self, *exc_info) -> None:
        self.storage.delete(keys.sweep_key())

    def delete_blobs(self, candidates: Iterable[tuple[str, int]]) -> None:
        """Delete these (key, size) blobs; only call when ``allowed``."""
        assert self.allowed, "sweeping without the lock"
        for key, size in candidates:
            self._renew()
            self.storage.delete(key)
            self.report.deleted_blobs += 1
            self.report.freed_bytes += size
            self.report.deleted.append(key)

    def remove_leftovers(self, older_than_s: float) -> None:
        """Abandoned intents and temp files of killed captures (file:// keeps them in tmp/)."""
        now = time.time()
        for info in self.storage.list(keys.INTENTS) + self.storage.list(keys.TMP):
            is_intent = info.key.startswith(keys.INTENTS + "/")
            written = _read_time(self.storage, info.key, "written") if is_intent else None
            if now - (written or info.modified) > older_than_s:
                self.storage.delete(info.key)
                self.report.removed_leftovers += 1

    def _live_intents(self) -> list[str]:
        now = time.time()
        live = []
        for info in self.storage.list(keys.INTENTS):
            written = _read_time(self.storage, info.key, "written") or info.modified
            if now - written < defaults.CAPTURE_LEASE_S:
                # Something else in intents/ is taken for a capture too: GC never guesses.
                live.append(keys.intent_of_key(info.key) or info.key)
        return live

    def _renew(self, force: bool = False) -> None:
        # A long sweep renews its lock so waiting captures do not take it for abandoned.
        now = time.time()
        if force or now - self._renewed > defaults.SWEEP_LEASE_S / 4:
            until = now + defaults.SWEEP_LEASE_S
            self.storage.write(keys.sweep_key(), json.dumps({"until": until}).encode())
            self._renewed = now


def _read_time(storage: Storage, key: str, name: str) -> float | None:
    try:
        return float(json.loads(storage.read(key))[name])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        log.warning("store: unreadable %s; treating it as abandoned", key)
        return None
