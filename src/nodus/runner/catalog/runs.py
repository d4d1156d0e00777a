"""The ``runs`` table: one row per run, with its workload, store, phase and runner.

A run is recorded with its stages and its ``accepted`` event in one transaction, read with its
stages (:class:`Run`), moved from phase to phase (through its :attr:`~RunStatements.lifecycle`,
:mod:`.lifecycle`), and deleted with every row that names it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from nodus.errors import NotFoundError, redacted
from nodus.runner.catalog.attempts import AttemptStatements, stage_row
from nodus.runner.catalog.connection import Statement, now
from nodus.runner.catalog.events import event_row
from nodus.runner.catalog.lifecycle import RunLifecycle
from nodus.runner.catalog.phases import Phase
from nodus.runner.catalog.run_ids import new_run_id

# The texts SQLite keeps in sqlite_master, as the first catalogs wrote them (indents included).
CREATE_RUNS = """CREATE TABLE runs (
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
    )"""
# {stage: Launch.to_dict()}: the executable every attempt runs, fixed at acceptance
ADD_LAUNCH = "ALTER TABLE runs ADD COLUMN launch TEXT"
# {run, snapshot, step, stage, mode}: the snapshot a run started from (resume_from, a branch)
ADD_PARENT = "ALTER TABLE runs ADD COLUMN parent TEXT"

# Every table holding rows of a run, children before the run itself.
_RUN_TABLES = ("pauses", "controls", "events", "attempts", "stages")


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


class RunStatements(AttemptStatements):
    """Record, find, list, move (``lifecycle``) and delete runs (read with stages and attempts)."""

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
        row = (run_id, key, name, json.dumps(workload), store, lock_name, Phase.QUEUED, at, at)
        statements = [
            (
                "INSERT INTO runs (id, key, name, workload, store, lock_name, phase, created_at,"
                " updated_at, launch, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*row, _json_or_none(launch), _json_or_none(parent)),
            )
        ]
        for idx, stage in enumerate(stage_names):
            phase = Phase.SUCCEEDED if stage in inherited else Phase.PENDING
            statements.append(stage_row(run_id, idx, stage, phase, (sources or {}).get(stage)))
        statements.append(event_row(run_id, None, None, "accepted", {"key": key}))
        self._transaction(statements)
        return run_id

    def adopt_run(
        self, run: dict[str, Any], stages: list[dict[str, Any]], attempts: list[dict[str, Any]]
    ) -> None:
        """Write a run known from elsewhere (its store's record) as these rows, in one
        transaction: its run, stage and attempt rows replace any this catalog had; its events
        stay. The caller chooses the columns (:mod:`nodus.runner.remote.adoption`)."""
        run_id = run["id"]
        statements: list[Statement] = [
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

    def list_runs(
        self,
        limit: int | None = 50,
        *,
        offset: int = 0,
        phase: str | None = None,
        name: str | None = None,
    ) -> list[Run]:
        """The newest runs first, without their stages; ``limit=None`` lists every run.

        ``offset`` skips that many of the newest; ``phase`` keeps one phase, ``name`` the runs
        whose name, id or key holds that text (any case)."""
        bound = -1 if limit is None else limit  # SQLite: a negative LIMIT has no bound
        where, params = _filters(phase, name)
        rows = self._rows(
            f"SELECT * FROM runs{where} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*params, bound, offset),
        )
        return [self._run(row, with_stages=False) for row in rows]

    def count_runs(self, phase: str | None = None, name: str | None = None) -> int:
        """How many runs :meth:`list_runs` would list without a limit."""
        where, params = _filters(phase, name)
        row = self._one(f"SELECT count(*) FROM runs{where}", params)
        return int(row[0]) if row else 0

    def lineage_runs(self) -> list[Run]:
        """Every run started from another run's snapshot, and every run one started from,
        newest first (without stages): the runs ``runs list --tree`` links."""
        rows = self._rows(
            "SELECT * FROM runs WHERE parent IS NOT NULL OR id IN "
            "(SELECT json_extract(parent, '$.run') FROM runs WHERE parent IS NOT NULL) "
            "ORDER BY created_at DESC, id"
        )
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
        statements = [(f"DELETE FROM {table} WHERE run_id = ?", (run_id,)) for table in _RUN_TABLES]
        self._transaction([*statements, ("DELETE FROM runs WHERE id = ?", (run_id,))])

    @property
    def lifecycle(self) -> RunLifecycle:
        """The one way a run changes phase: each change checked against its table."""
        return RunLifecycle(self)

    def _phase_of(self, run_id: str) -> Phase:
        row = self._one("SELECT phase FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise NotFoundError(f"no run with id {run_id!r} in {self.path}")
        return Phase(row[0])

    def _write_phase(
        self,
        run_id: str,
        phase: Phase,
        *,
        message: str | None,
        stage: str | None,
        stage_phase: Phase | None,
    ) -> None:
        """Move the run (and optionally one stage) to a phase, recording a ``phase`` event;
        only :class:`RunLifecycle` calls it, once it checked the change.

        The run's exit status and ``finished_at`` go with the phase: set where it stops.
        """
        at = now()
        finished = at if phase.stopped else None
        statements = [
            (
                "UPDATE runs SET phase = ?, exit_status = ?, message = ?, updated_at = ?,"
                " finished_at = ? WHERE id = ?",
                (phase, phase.exit_status, message and redacted(message), at, finished, run_id),
            ),
            event_row(run_id, stage, None, "phase", {"phase": phase, "message": message}),
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

    def set_key(self, run_id: str, key: str | None) -> None:
        """Give the run ``key`` (None: it gives its key up, for a new run to take it)."""
        self._execute("UPDATE runs SET key = ?, updated_at = ? WHERE id = ?", (key, now(), run_id))
        self._changed(run_id)

    def set_runner(self, run_id: str, pid: int | None, host: str | None) -> None:
        self._execute(
            "UPDATE runs SET runner_pid = ?, runner_host = ?, updated_at = ? WHERE id = ?",
            (pid, host, now(), run_id),
        )

    def _run(self, row: sqlite3.Row, with_stages: bool = True) -> Run:
        data = dict(row)
        data["workload"] = json.loads(data["workload"])
        data["launch"] = json.loads(data["launch"]) if data["launch"] else None
        data["parent"] = json.loads(data["parent"]) if data["parent"] else None
        run = Run(**data)
        if with_stages:
            run.stages = self.stages(run.id)
        return run


def _filters(phase: str | None, name: str | None) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (and its parameters) of a listing by phase and by a text in the name."""
    clauses, params = [], []
    if phase:
        clauses.append("phase = ?")
        params.append(phase)
    if name:
        clauses.append(
            "(instr(lower(name), lower(?)) OR instr(id, ?) OR instr(lower(coalesce(key, '')), "
            "lower(?)))"
        )
        params += [name, name, name]
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _json_or_none(value: dict[str, Any] | None) -> str | None:
    return json.dumps(value) if value is not None else None
