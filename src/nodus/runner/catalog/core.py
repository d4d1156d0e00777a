"""The run catalog: runs, stages, attempts, events and control requests in one SQLite file.

Several nodus processes use the catalog at once (a runner, ``runs wait``, ``runs cancel``, cron),
so it runs in WAL mode with a busy timeout, and every write is one short transaction. Control
requests (cancel, pause) are rows another process inserts and the runner's poll loop
picks up, so no process ever signals another one directly.

The schema is versioned with ``PRAGMA user_version``; ``_MIGRATIONS[n]`` takes version ``n-1`` to
``n``. A catalog written by a newer nodus is refused rather than guessed at.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from nodus._atomic import create_new_private, private_folder
from nodus.errors import CatalogError, NotFoundError, redacted, redacted_values
from nodus.registry.table import SCHEMA as MODEL_REGISTRY_SCHEMA
from nodus.registry.table import ModelTable
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.catalog.run_ids import new_run_id
from nodus.schemas import defaults

_MIGRATIONS = {
    1: """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        key TEXT UNIQUE,
        name TEXT NOT NULL,
        workload TEXT NOT NULL,          -- ResolvedWorkload.to_dict() as JSON
        store TEXT NOT NULL,             -- store URL the run's snapshots live in
        lock_name TEXT NOT NULL,
        phase TEXT NOT NULL,
        exit_status INTEGER,
        message TEXT,
        runner_pid INTEGER,
        runner_host TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE stages (
        run_id TEXT NOT NULL REFERENCES runs(id),
        idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        phase TEXT NOT NULL,
        source_snapshot TEXT,
        recoveries INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE attempts (
        run_id TEXT NOT NULL,
        stage TEXT NOT NULL,
        number INTEGER NOT NULL,
        outcome TEXT,                    -- NULL while running
        detail TEXT,
        restored_snapshot TEXT,
        restored_step INTEGER,
        pid INTEGER,
        host TEXT,
        log_path TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        PRIMARY KEY (run_id, stage, number)
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        stage TEXT,
        attempt INTEGER,
        type TEXT NOT NULL,
        at TEXT NOT NULL,
        details TEXT NOT NULL
    );
    CREATE INDEX events_run ON events(run_id, id);
    CREATE TABLE controls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        action TEXT NOT NULL,
        args TEXT NOT NULL,
        requested_at TEXT NOT NULL,
        handled_at TEXT
    );
    """,
    2: """
    ALTER TABLE attempts ADD COLUMN devices INTEGER;  -- accelerators the attempt was given
    CREATE TABLE pauses (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        control_id INTEGER NOT NULL,     -- the control row that asks the runner for it
        policy TEXT NOT NULL,            -- "save" | "latest"
        requested_at TEXT NOT NULL,
        deadline TEXT NOT NULL,          -- requested_at + the --deadline duration
        deadline_s REAL NOT NULL,
        state TEXT NOT NULL,             -- requested pausing paused cancelled completed failed
        accepted_at TEXT,
        save_bytes INTEGER NOT NULL DEFAULT 0,
        snapshot TEXT,                   -- the acknowledged snapshot: what a resume restores
        step INTEGER,
        failure TEXT,
        timed_out INTEGER NOT NULL DEFAULT 0,
        resources_released INTEGER NOT NULL DEFAULT 0,
        ended_at TEXT
    );
    CREATE INDEX pauses_run ON pauses(run_id, id);
    """,
    3: """
    -- {stage: Launch.to_dict()}: the executable every attempt runs, fixed at acceptance
    ALTER TABLE runs ADD COLUMN launch TEXT
    """,
    4: """
    -- {run, snapshot, step, stage, mode}: the snapshot a run started from (resume_from, a branch)
    ALTER TABLE runs ADD COLUMN parent TEXT
    """,
    5: MODEL_REGISTRY_SCHEMA,  # the model registry's names, versions and aliases
}
SCHEMA_VERSION = max(_MIGRATIONS)


def now() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    return _stamp(datetime.now(UTC))


@dataclass
class Run:
    id: str
    key: str | None
    name: str
    workload: dict[str, Any]
    store: str
    lock_name: str
    phase: Phase
    exit_status: int | None
    message: str | None
    runner_pid: int | None
    runner_host: str | None
    created_at: str
    updated_at: str
    finished_at: str | None
    launch: dict[str, Any] | None = None  # {stage: launch.Launch.to_dict()}; None before v3
    # {run, snapshot, step, stage, mode} of the snapshot it started from (runner.upkeep.lineage)
    parent: dict[str, Any] | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.phase = Phase(self.phase)

    @property
    def finished(self) -> bool:
        """Its drive has ended (a terminal phase or PAUSED): nothing moves it any more."""
        return self.phase.stopped


class Catalog:
    """One connection to ``$NODUS_HOME/nodus.db``, usable from any thread of one process.

    A store may call the fencing guard from its upload thread, so the connection is shared
    across threads and every statement or transaction holds ``_mutex``.

    A runner driving a run against a shared store mirrors the run into it
    (:mod:`nodus.runner.remote.record`): it registers an observer, told the run's id after each
    change of phase, stage or attempt, and a fence, asked before each commit.
    """

    def __init__(self, home: str) -> None:
        self.home = home
        try:
            private_folder(home)  # the home, when this makes it: 0700 (docs/security.md)
        except OSError as error:
            raise CatalogError(f"nodus's home {home} cannot be made: {_os_words(error)}") from None
        self.path = os.path.join(home, defaults.CATALOG_FILE)
        self._mutex = threading.RLock()
        self._observers: list[Callable[[str], None]] = []
        self._fences: list[Callable[[str, str, int], None]] = []
        # Created 0600 before SQLite opens it: its -wal and -shm files take its mode. Only a new
        # file is touched: closing any descriptor of a database this process has open would
        # drop the POSIX locks SQLite holds on it (another Catalog of this process).
        create_new_private(self.path)
        try:
            self._db = sqlite3.connect(
                self.path,
                timeout=defaults.CATALOG_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            self._db.row_factory = sqlite3.Row
            self._enable_wal()
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.Error as error:
            raise self._explain(error) from None

    def close(self) -> None:
        self._db.close()

    def _enable_wal(self) -> None:
        """Switch a new catalog to WAL, waiting out another process doing the same.

        SQLite does not call its busy handler for a journal-mode change: when two processes
        open a new catalog at once (`nodus run` creating its home while `nodus runs list` looks),
        the second is told "database is locked" at once. It is retried here, up to the same
        busy timeout as any other statement.
        """
        deadline = time.monotonic() + defaults.CATALOG_BUSY_TIMEOUT_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    # --- observers and fences ---------------------------------------------------------------

    def observe(self, observer: Callable[[str], None]) -> Callable[[], None]:
        """Call ``observer(run_id)`` after each phase, stage or attempt change; the remover."""
        self._observers.append(observer)
        return lambda: self._observers.remove(observer)

    def add_fence(self, fence: Callable[[str, str, int], None]) -> Callable[[], None]:
        """``fence(run_id, stage, attempt)`` runs in :meth:`check_fences`; the remover."""
        self._fences.append(fence)
        return lambda: self._fences.remove(fence)

    def check_fences(self, run_id: str, stage: str, attempt: int) -> None:
        """Run every fence; one raises StaleAttemptError when the attempt may not commit."""
        for fence in list(self._fences):
            fence(run_id, stage, attempt)

    def _changed(self, run_id: str) -> None:
        for observer in list(self._observers):
            observer(run_id)

    # --- plumbing ---------------------------------------------------------------------------

    def _explain(self, error: sqlite3.Error) -> CatalogError:
        """Turn SQLite's words into what the user can do about it."""
        text = str(error)
        if "locked" in text or "busy" in text:
            return CatalogError(
                f"the run catalog {self.path} is locked by another process and stayed locked "
                f"for {defaults.CATALOG_BUSY_TIMEOUT_S:.0f}s ({text}); retry, or find the process "
                f"holding it with `fuser {self.path}`"
            )
        if "full" in text:  # SQLITE_FULL: "database or disk is full"
            return CatalogError(
                f"the run catalog {self.path} cannot be written: the disk is full ({text}); "
                "free space on it and retry (nothing in the catalog was lost)"
            )
        if "readonly" in text or _read_only(self.home):
            return CatalogError(
                f"the run catalog {self.path} cannot be written: {self.home} is read-only "
                f"({text}); give nodus a writable home (--home or NODUS_HOME)"
            )
        if "malformed" in text or "not a database" in text:
            return CatalogError(
                f"the run catalog {self.path} is damaged ({text}); move it aside "
                f"(`mv {self.path} {self.path}.damaged`) and nodus starts a new one; snapshots "
                "in the store are not affected"
            )
        return CatalogError(
            f"the run catalog {self.path} cannot be used ({text}); check that {self.home} is "
            "a folder you can write, on a disk with free space"
        )

    def _execute(self, sql: str, params: tuple | dict = ()) -> int | None:
        """One write statement; the new row id for an INSERT."""
        with self._mutex:
            try:
                return self._db.execute(sql, params).lastrowid
            except sqlite3.Error as error:
                raise self._explain(error) from None

    def _rows(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        with self._mutex:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as error:
                raise self._explain(error) from None

    def _one(self, sql: str, params: tuple | dict = ()) -> sqlite3.Row | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _transaction(self, statements: list[tuple[str, tuple]]) -> None:
        with self._mutex:
            self._run_transaction(statements)

    def _run_transaction(self, statements: list[tuple[str, tuple]]) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    self._db.execute(sql, params)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as error:
            raise self._explain(error) from None

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise CatalogError(
                f"the run catalog {self.path} has schema version {version}, newer than this "
                f"nodus understands ({SCHEMA_VERSION}); upgrade nodus"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            self._db.execute("BEGIN IMMEDIATE")
            # Another process may have migrated while we waited for the write lock.
            if self._db.execute("PRAGMA user_version").fetchone()[0] >= target:
                self._db.execute("COMMIT")
                continue
            for statement in _MIGRATIONS[target].split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version = {target}")
            self._db.execute("COMMIT")

    @property
    def models(self) -> ModelTable:
        """The model registry's tables, over this catalog's connection (``nodus.registry``)."""
        return ModelTable(self._rows, self._transaction)

    # --- runs -------------------------------------------------------------------------------

    def create_run(
        self,
        *,
        name: str,
        workload: dict[str, Any],
        store: str,
        key: str | None,
        lock_name: str,
        stage_names: list[str],
        run_id: str | None = None,
        launch: dict[str, Any] | None = None,
        parent: dict[str, Any] | None = None,
        sources: dict[str, str] | None = None,
        inherited: tuple[str, ...] = (),
    ) -> str:
        """Record a new run, with everything it needs to be driven, in one transaction.

        ``parent`` is the snapshot it starts from; ``sources`` the source snapshot of each stage
        when known already (a branch shares its parent's); ``inherited`` the stages it takes as
        done from its parent (the stages before the one that continues), SUCCEEDED at once.
        """
        run_id = run_id or new_run_id()
        at = now()
        stored_launch = json.dumps(launch) if launch is not None else None
        statements = [
            (
                "INSERT INTO runs (id, key, name, workload, store, lock_name, phase, created_at,"
                " updated_at, launch, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    key,
                    name,
                    json.dumps(workload),
                    store,
                    lock_name,
                    Phase.QUEUED,
                    at,
                    at,
                    stored_launch,
                    json.dumps(parent) if parent is not None else None,
                ),
            )
        ]
        statements += [
            (
                "INSERT INTO stages (run_id, idx, name, phase, source_snapshot)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    run_id,
                    i,
                    stage,
                    Phase.SUCCEEDED if stage in inherited else Phase.PENDING,
                    (sources or {}).get(stage),
                ),
            )
            for i, stage in enumerate(stage_names)
        ]
        statements.append(_event_row(run_id, None, None, "accepted", {"key": key}))
        self._transaction(statements)
        return run_id

    def adopt_run(
        self, run: dict[str, Any], stages: list[dict[str, Any]], attempts: list[dict[str, Any]]
    ) -> None:
        """Write a run known from elsewhere (its store's record) as these rows, in one
        transaction: its run, stage and attempt rows replace any this catalog had; its events
        stay. The caller chooses the columns (:mod:`nodus.runner.remote.adoption`)."""
        run_id = run["id"]
        statements = [
            (f"DELETE FROM {table} WHERE {column} = ?", (run_id,))
            for table, column in (("attempts", "run_id"), ("stages", "run_id"), ("runs", "id"))
        ]
        for table, rows in (("runs", [run]), ("stages", stages), ("attempts", attempts)):
            statements += [
                (
                    f"INSERT INTO {table} ({', '.join(row)}) VALUES "
                    f"({', '.join('?' for _ in row)})",
                    tuple(row.values()),
                )
                for row in rows
            ]
        self._transaction(statements)

    def get_run(self, ref: str) -> Run:
        """A run by id or by key; NotFoundError names what was looked for."""
        row = self._one("SELECT * FROM runs WHERE id = ? OR key = ?", (ref, ref))
        if row is None:
            raise NotFoundError(f"no run with id or key {ref!r} in {self.path}")
        return self._run(row)

    def find_by_key(self, key: str) -> Run | None:
        row = self._one("SELECT * FROM runs WHERE key = ?", (key,))
        return self._run(row) if row else None

    def list_runs(self, limit: int | None = 50) -> list[Run]:
        """The newest runs first, without their stages; ``limit=None`` lists every run."""
        bound = -1 if limit is None else limit  # SQLite: a negative LIMIT has no bound
        rows = self._rows("SELECT * FROM runs ORDER BY created_at DESC, id LIMIT ?", (bound,))
        return [self._run(row, with_stages=False) for row in rows]

    def unfinished_runs(self) -> list[Run]:
        """The runs not stopped for good (``Phase.final``), newest first, without their stages:
        found by SQLite, so a home of many finished runs costs a caller nothing per run."""
        final = [phase.value for phase in Phase if phase.final]
        marks = ", ".join("?" * len(final))
        rows = self._rows(
            f"SELECT * FROM runs WHERE phase NOT IN ({marks}) ORDER BY created_at DESC, id",
            tuple(final),
        )
        return [self._run(row, with_stages=False) for row in rows]

    def children(self, run_id: str) -> list[Run]:
        """The runs started from a snapshot of ``run_id``, oldest first (without stages)."""
        rows = self._rows(
            "SELECT * FROM runs WHERE json_extract(parent, '$.run') = ? ORDER BY created_at, id",
            (run_id,),
        )
        return [self._run(row, with_stages=False) for row in rows]

    def delete_run(self, run_id: str) -> None:
        """Remove every row of a run (``nodus runs delete``, after its store objects are gone)."""
        tables = ("pauses", "controls", "events", "attempts", "stages")
        statements = [(f"DELETE FROM {table} WHERE run_id = ?", (run_id,)) for table in tables]
        self._transaction([*statements, ("DELETE FROM runs WHERE id = ?", (run_id,))])

    def _run(self, row: sqlite3.Row, with_stages: bool = True) -> Run:
        data = dict(row)
        data["workload"] = json.loads(data["workload"])
        data["launch"] = json.loads(data["launch"]) if data["launch"] else None
        data["parent"] = json.loads(data["parent"]) if data["parent"] else None
        run = Run(**data)
        if with_stages:
            run.stages = self.stages(run.id)
        return run

    def set_phase(
        self,
        run_id: str,
        phase: Phase,
        *,
        message: str | None = None,
        stage: str | None = None,
        stage_phase: Phase | None = None,
    ) -> None:
        """Move the run (and optionally one stage) to a phase, recording a ``phase`` event.

        The run's exit status and ``finished_at`` go with the phase: set where it stops.
        """
        at = now()
        phase = Phase(phase)
        finished = at if phase.stopped else None
        statements = [
            (
                "UPDATE runs SET phase = ?, exit_status = ?, message = ?, updated_at = ?,"
                " finished_at = ? WHERE id = ?",
                (phase, phase.exit_status, message and redacted(message), at, finished, run_id),
            ),
            _event_row(run_id, stage, None, "phase", {"phase": phase, "message": message}),
        ]
        if stage is not None:
            statements.append(
                (
                    "UPDATE stages SET phase = ? WHERE run_id = ? AND name = ?",
                    (stage_phase or phase, run_id, stage),
                )
            )
        self._transaction(statements)
        self._changed(run_id)

    def set_runner(self, run_id: str, pid: int | None, host: str | None) -> None:
        self._execute(
            "UPDATE runs SET runner_pid = ?, runner_host = ?, updated_at = ? WHERE id = ?",
            (pid, host, now(), run_id),
        )

    # --- stages and attempts ----------------------------------------------------------------

    def stages(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._rows("SELECT * FROM stages WHERE run_id = ? ORDER BY idx", (run_id,))
        result = []
        for row in rows:
            stage = dict(row)
            stage["attempts"] = self.attempts(run_id, stage["name"])
            result.append(stage)
        return result

    def set_stage(self, run_id: str, stage: str, **values: Any) -> None:
        columns = ", ".join(f"{name} = ?" for name in values)
        self._execute(
            f"UPDATE stages SET {columns} WHERE run_id = ? AND name = ?",
            (*values.values(), run_id, stage),
        )
        self._changed(run_id)

    def attempts(self, run_id: str, stage: str) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT * FROM attempts WHERE run_id = ? AND stage = ? ORDER BY number",
            (run_id, stage),
        )
        return [dict(row) for row in rows]

    def current_attempt(self, run_id: str, stage: str) -> int:
        """The newest attempt number of a stage (0 before the first): the fencing token."""
        row = self._one(
            "SELECT MAX(number) FROM attempts WHERE run_id = ? AND stage = ?", (run_id, stage)
        )
        return row[0] or 0

    def start_attempt(self, run_id: str, stage: str, **values: Any) -> int:
        """Allocate the next attempt number in one transaction, so two runners never share one."""
        with self._mutex:
            number = self._start_attempt(run_id, stage, values)
        self._changed(run_id)
        return number

    def _start_attempt(self, run_id: str, stage: str, values: dict[str, Any]) -> int:
        try:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute(
                "SELECT MAX(number) FROM attempts WHERE run_id = ? AND stage = ?",
                (run_id, stage),
            ).fetchone()
            number = (row[0] or 0) + 1
            fields = {"run_id": run_id, "stage": stage, "number": number, "started_at": now()}
            fields.update(values)
            self._db.execute(
                f"INSERT INTO attempts ({', '.join(fields)}) VALUES "
                f"({', '.join('?' for _ in fields)})",
                tuple(fields.values()),
            )
            self._db.execute("COMMIT")
        except sqlite3.Error as error:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise self._explain(error) from None
        return number

    def update_attempt(self, run_id: str, stage: str, number: int, **values: Any) -> None:
        self._execute(*_attempt_update(run_id, stage, number, values))

    def end_attempt(
        self,
        run_id: str,
        stage: str,
        number: int,
        outcome: AttemptOutcome,
        detail: str,
        *,
        announce: bool = False,
    ) -> None:
        """Record how the attempt ended; ``announce``: with its ``attempt_ended`` event, in the
        same transaction (never one without the other)."""
        outcome = AttemptOutcome(outcome)
        detail = redacted(detail)
        values = {"outcome": outcome, "detail": detail, "ended_at": now()}
        statements = [_attempt_update(run_id, stage, number, values)]
        if announce:
            details = {"outcome": outcome, "detail": detail}
            statements.append(_event_row(run_id, stage, number, "attempt_ended", details))
        self._transaction(statements)
        self._changed(run_id)

    # --- events -----------------------------------------------------------------------------

    def add_event(
        self,
        run_id: str,
        type_: str,
        details: dict[str, Any] | None = None,
        *,
        stage: str | None = None,
        attempt: int | None = None,
    ) -> None:
        sql, params = _event_row(run_id, stage, attempt, type_, details or {})
        self._execute(sql, params)

    def has_event(self, run_id: str, type_: str) -> bool:
        """Whether ``run_id``'s log holds an event of ``type_`` (without reading the log)."""
        rows = self._rows(
            "SELECT 1 FROM events WHERE run_id = ? AND type = ? LIMIT 1", (run_id, type_)
        )
        return bool(rows)

    def events(
        self, run_id: str, after: int = 0, types: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """The run's events after ``after``, oldest first; only ``types`` when given."""
        sql = "SELECT * FROM events WHERE run_id = ? AND id > ?"
        if types:
            sql += f" AND type IN ({', '.join('?' * len(types))})"
        rows = self._rows(f"{sql} ORDER BY id", (run_id, after, *types))
        return [{**dict(row), "details": json.loads(row["details"])} for row in rows]

    # --- control requests -------------------------------------------------------------------

    def request(self, run_id: str, action: str, args: dict[str, Any] | None = None) -> int:
        row_id = self._execute(
            "INSERT INTO controls (run_id, action, args, requested_at) VALUES (?, ?, ?, ?)",
            (run_id, action, json.dumps(args or {}), now()),
        )
        return int(row_id or 0)

    def pending_controls(self, run_id: str) -> Iterator[dict[str, Any]]:
        rows = self._rows(
            "SELECT * FROM controls WHERE run_id = ? AND handled_at IS NULL ORDER BY id",
            (run_id,),
        )
        for row in rows:
            yield {**dict(row), "args": json.loads(row["args"])}

    def mark_handled(self, control_id: int) -> None:
        self._execute("UPDATE controls SET handled_at = ? WHERE id = ?", (now(), control_id))

    # --- pauses -----------------------------------------------------------------------------

    def request_pause(self, run_id: str, policy: str, deadline_s: float) -> dict[str, Any]:
        """Record a pause and the control row that hands it to the runner, in one transaction."""
        at = datetime.now(UTC)
        deadline = at + timedelta(seconds=deadline_s)
        with self._mutex:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                control = self._db.execute(
                    "INSERT INTO controls (run_id, action, args, requested_at) VALUES (?, ?, ?, ?)",
                    (run_id, "pause", json.dumps({"policy": policy}), _stamp(at)),
                ).lastrowid
                self._db.execute(
                    "INSERT INTO pauses (run_id, control_id, policy, requested_at, deadline,"
                    " deadline_s, state) VALUES (?, ?, ?, ?, ?, ?, 'requested')",
                    (run_id, control, policy, _stamp(at), _stamp(deadline), deadline_s),
                )
                self._db.execute("COMMIT")
            except sqlite3.Error as error:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise self._explain(error) from None
        pause = self.latest_pause(run_id)
        assert pause is not None
        return pause

    def latest_pause(self, run_id: str) -> dict[str, Any] | None:
        """The run's newest pause (the one ``runs get`` shows), or None if it was never paused."""
        row = self._one("SELECT * FROM pauses WHERE run_id = ? ORDER BY id DESC LIMIT 1", (run_id,))
        return _pause(row) if row else None

    def pause_for_control(self, control_id: int) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM pauses WHERE control_id = ?", (control_id,))
        return _pause(row) if row else None

    def update_pause(self, pause_id: int, **values: Any) -> None:
        columns = ", ".join(f"{name} = ?" for name in values)
        self._execute(f"UPDATE pauses SET {columns} WHERE id = ?", (*values.values(), pause_id))


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _pause(row: sqlite3.Row) -> dict[str, Any]:
    pause = dict(row)
    pause["timed_out"] = bool(pause["timed_out"])
    pause["resources_released"] = bool(pause["resources_released"])
    return pause


def _attempt_update(
    run_id: str, stage: str, number: int, values: dict[str, Any]
) -> tuple[str, tuple]:
    columns = ", ".join(f"{name} = ?" for name in values)
    return (
        f"UPDATE attempts SET {columns} WHERE run_id = ? AND stage = ? AND number = ?",
        (*values.values(), run_id, stage, number),
    )


def _event_row(
    run_id: str, stage: str | None, attempt: int | None, type_: str, details: dict[str, Any]
) -> tuple[str, tuple]:
    return (
        "INSERT INTO events (run_id, stage, attempt, type, at, details) VALUES (?, ?, ?, ?, ?, ?)",
        # a URL's password in an error's text is never recorded (docs/security.md)
        (run_id, stage, attempt, type_, now(), json.dumps(redacted_values(details), default=str)),
    )


def _read_only(folder: str) -> bool:
    """Whether ``folder`` lies on a file system mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _os_words(error: OSError) -> str:
    """An OS error in its own words, with what the user would look for next."""
    words = error.strerror or str(error)
    if error.errno == errno.EROFS:
        return f"{words} (the file system is mounted read-only)"
    return words
