"""Run records and leases: what a store holds so that a run can be recovered from it alone.

Next to a run's snapshots the store keeps three kinds of small JSON objects, each written with
one ``Storage.write`` (atomic: a reader sees all of it or none):

    runs/<run id>/record.json     the run's record (``version``, resolution, source snapshots,
                                  phase, stages, attempts, the driver's lease token)
    keys/<hash of key>.json       {"key", "run"}: the run of a ``--key``
    leases/<run id>.json          {"holder", "token", "host", "pid", "expires"}: who drives it

What a record means to the runner is :mod:`nodus.runner.remote.record`'s; this module only keeps
them and carries out the lease protocol, which is the whole truth about taking a run:

1. Read the lease. One that has not expired, held by a process that may still live, refuses
   the taker with :class:`~nodus.errors.AlreadyRunningError` naming its holder. A process on
   this host is asked directly (a dead pid frees its lease at once); one elsewhere is trusted
   until its lease expires.
2. Where there was none and the store can create an object only if it is absent (a local or
   shared POSIX store: a link never replaces), create the lease that way: the one whose create
   succeeded drives, at once. Otherwise (a lease to take over, or an object store) write a lease
   of one's own (a fresh token), wait ``settle_s``, read it back: only the one whose token is
   still there drives; the others are refused naming it. Two takers that both passed step 1
   both write within the settle time, the later write wins, and both read it.

The protocol's limits: it needs every write to be visible to a read that starts after it
(S3, GCS and a POSIX file system give that), a taker that stalls longer than ``settle_s``
between its read and its write can still overwrite a lease already read back, and expiry
compares wall clocks, so machines' clocks must agree to well within the lease. The runner's
commit guard (the attempt number and lease token in the record) covers the rest: a driver that
lost its lease never commits a snapshot.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from nodus.errors import AlreadyRunningError, StoreError
from nodus.store import fields, keys
from nodus.store.storage import Storage

__all__ = ["RECORD_VERSION", "Lease", "Leases", "RunRecords"]

RECORD_VERSION = 1
"""The run record's format; a record of a newer version is refused, never guessed at."""


class RunRecords:
    """The run records and the ``--key`` index of one store."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def read(self, run_id: str) -> dict[str, Any] | None:
        """The run's record, every field checked; None when the store has none.

        A record that is not what nodus writes (not JSON, a field missing or of another type)
        is damage: StoreError naming the field, never a record passed on to fail later.
        """
        try:
            raw = self._storage.read(keys.run_record_key(run_id))
        except FileNotFoundError:
            return None
        try:
            record = fields.mapping(json.loads(raw), "record")
        except (ValueError, RecursionError) as error:
            raise self._damaged(run_id, f"not a JSON object: {str(error)[:200]}") from None
        version = record.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version > RECORD_VERSION:
            raise StoreError(
                f"the record of {run_id} in {self._storage.url} has version {version!r}, newer "
                f"than this nodus understands ({RECORD_VERSION}); upgrade nodus to recover it"
            )
        try:
            _check_record(record, run_id)
        except fields.Damage as error:
            raise self._damaged(run_id, str(error)) from None
        return record

    def _damaged(self, run_id: str, why: str) -> StoreError:
        return StoreError(
            f"the record of {run_id} in {self._storage.url} is damaged ({why}); the run "
            "cannot be recovered from it"
        )

    def write(self, record: dict[str, Any]) -> None:
        """Store ``record`` (a dict with ``id``) as the run's record, stamped with its version."""
        stamped = {**record, "version": RECORD_VERSION}
        _write_object(self._storage, keys.run_record_key(record["id"]), stamped)

    def run_of_key(self, key: str) -> str | None:
        """The id of the run a ``--key`` names in this store, or None."""
        entry = _read_object(self._storage, keys.run_key_index_key(key))
        if entry is None or entry.get("key") != key:  # a hash collision is no match
            return None
        run = entry.get("run")
        return run if isinstance(run, str) else None

    def write_key(self, key: str, run_id: str) -> None:
        _write_object(self._storage, keys.run_key_index_key(key), {"key": key, "run": run_id})

    def delete(self, run_id: str, key: str | None) -> None:
        """Forget a deleted run: its record and, if it still names this run, its key's entry."""
        if key is not None and self.run_of_key(key) == run_id:
            self._storage.delete(keys.run_key_index_key(key))
        self._storage.delete(keys.run_record_key(run_id))


@dataclass(frozen=True)
class Lease:
    """One runner's claim on a run, until ``expires`` (seconds since the epoch)."""

    holder: str  # ``user@host pid N``, for people
    token: str  # fresh for every take: what tells two takers apart
    host: str
    pid: int
    expires: float

    def lapsed(self, now: float) -> bool:
        """True when no one may rely on it any more: expired, or its process on this host died."""
        if now >= self.expires:
            return True
        return self.host == socket.gethostname() and not _pid_alive(self.pid)


class Leases:
    """The leases of one store; ``duration_s`` is how long a lease lasts unless renewed."""

    def __init__(
        self,
        storage: Storage,
        *,
        duration_s: float,
        settle_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._storage = storage
        self.duration_s = duration_s
        self.settle_s = settle_s
        self._clock = clock

    def read(self, run_id: str) -> Lease | None:
        data = _read_object(self._storage, keys.lease_key(run_id))
        if data is None:
            return None
        try:
            return Lease(
                holder=str(data["holder"]),
                token=str(data["token"]),
                host=str(data["host"]),
                pid=int(data["pid"]),
                expires=float(data["expires"]),
            )
        except (KeyError, TypeError, ValueError):
            return None  # not a lease nodus wrote: as good as none

    def take(self, run_id: str) -> Lease:
        """Take the run's lease (the protocol above) or raise AlreadyRunningError."""
        current = self.read(run_id)
        if current is not None and not current.lapsed(self._clock()):
            raise AlreadyRunningError(self._held_message(run_id, current))
        mine = self._new_lease()
        if current is None and self._storage.is_local:
            if self._create(run_id, mine):
                return mine  # created where there was none, by a write that never replaces
            current = self.read(run_id)  # another taker created it first
            if current is not None and not current.lapsed(self._clock()):
                raise AlreadyRunningError(self._held_message(run_id, current))
        self._write(run_id, mine)
        time.sleep(self.settle_s)
        back = self.read(run_id)
        if back is None or back.token != mine.token:
            raise AlreadyRunningError(self._held_message(run_id, back))
        return mine

    def renew(self, run_id: str, lease: Lease) -> Lease | None:
        """The lease with a new expiry; None (and nothing written) when it is no longer ours."""
        current = self.read(run_id)
        if current is None or current.token != lease.token:
            return None
        renewed = Lease(
            lease.holder, lease.token, lease.host, lease.pid, self._clock() + self.duration_s
        )
        self._write(run_id, renewed)
        return renewed

    def holds(self, run_id: str, lease: Lease) -> bool:
        current = self.read(run_id)
        return current is not None and current.token == lease.token

    def release(self, run_id: str, lease: Lease) -> None:
        """Drop the lease if it is still ours (a lease taken over is the new holder's)."""
        if self.holds(run_id, lease):
            self._storage.delete(keys.lease_key(run_id))

    def _new_lease(self) -> Lease:
        host = socket.gethostname()
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or "?"
        return Lease(
            holder=f"{user}@{host} pid {os.getpid()}",
            token=os.urandom(8).hex(),  # secrets.token_hex(8), without importing it
            host=host,
            pid=os.getpid(),
            expires=self._clock() + self.duration_s,
        )

    def _create(self, run_id: str, lease: Lease) -> bool:
        """Write the lease only if the run has none, in one step no other write can split:
        a local (or shared POSIX) store links a finished file into place, which never
        replaces. Only for a local store; others settle instead."""
        spool = self._storage.spool_path()
        with open(spool, "w", encoding="utf-8") as handle:
            json.dump(asdict(lease), handle, sort_keys=True)
        return self._storage.adopt_file(spool, keys.lease_key(run_id))

    def _write(self, run_id: str, lease: Lease) -> None:
        _write_object(self._storage, keys.lease_key(run_id), asdict(lease))

    def _held_message(self, run_id: str, lease: Lease | None) -> str:
        if lease is None:
            who = "another runner"
            until = ""
        else:
            who = lease.holder
            left = max(0.0, lease.expires - self._clock())
            until = f"; its lease in {self._storage.url} lasts {left:.0f}s more unless renewed"
        return f"{run_id} is already running elsewhere ({who}{until}); wait for it or cancel it"


def _check_record(record: dict[str, Any], run_id: str) -> None:
    """Every field the runner reads back (``runner.remote.adoption``) of the type it writes."""
    if fields.text(record, "id") != run_id:
        raise fields.Damage(f"id is {record['id'][:80]!r}, not {run_id}")
    for name in ("key", "message", "finished_at", "driver", "updated_at"):
        fields.text(record, name, optional=True)
    for name in ("name", "store", "phase", "created_at"):
        fields.text(record, name)
    fields.integer(record, "exit_status", optional=True)
    fields.mapping(record.get("workload"), "workload")
    for name in ("launch", "parent"):
        if record.get(name) is not None:
            fields.mapping(record[name], name)
    for i, stage in enumerate(fields.sequence(record, "stages")):
        where = f"stages[{i}]"
        fields.mapping(stage, where)
        fields.integer(stage, "idx", where, minimum=0)
        fields.integer(stage, "recoveries", where, minimum=0)
        for name in ("name", "phase"):
            fields.text(stage, name, where)
        fields.text(stage, "source_snapshot", where, optional=True)
        for j, attempt in enumerate(fields.sequence(stage, "attempts", where)):
            _check_attempt(attempt, f"{where}.attempts[{j}]")


def _check_attempt(attempt: Any, where: str) -> None:
    fields.mapping(attempt, where)
    fields.integer(attempt, "number", where, minimum=0)
    fields.text(attempt, "started_at", where)
    for name in ("outcome", "detail", "restored_snapshot", "host", "ended_at"):
        fields.text(attempt, name, where, optional=True)
    for name in ("restored_step", "pid", "devices"):
        fields.integer(attempt, name, where, optional=True, minimum=0)


def _read_object(storage: Storage, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(storage.read(key))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_object(storage: Storage, key: str, data: dict[str, Any]) -> None:
    try:
        storage.write(key, json.dumps(data, sort_keys=True, default=str).encode())
    except OSError as error:
        raise StoreError(f"cannot write {key} in {storage.url}: {error}") from error


def _pid_alive(pid: int) -> bool:
    """True unless ``pid`` is certainly gone (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
