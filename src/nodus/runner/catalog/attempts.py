"""The ``stages`` and ``attempts`` tables: a run's stages in order, and each stage's attempts.

An attempt's number is allocated in the transaction that records it, so two runners never share
one: the newest number is the fencing token a stale attempt is refused by.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from nodus.errors import redacted, redacted_values
from nodus.runner.catalog.connection import Connection, Statement, now
from nodus.runner.catalog.events import event_row
from nodus.runner.catalog.phases import AttemptOutcome, Phase

# The texts SQLite keeps in sqlite_master, as the first catalogs wrote them (indents included).
CREATE_STAGES = """CREATE TABLE stages (
        run_id TEXT NOT NULL REFERENCES runs(id),
        idx INTEGER NOT NULL,
        name TEXT NOT NULL,
        phase TEXT NOT NULL,
        source_snapshot TEXT,
        recoveries INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, name)
    )"""
CREATE_ATTEMPTS = """CREATE TABLE attempts (
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
    )"""
ADD_DEVICES = "ALTER TABLE attempts ADD COLUMN devices INTEGER"  # accelerators it was given
# The cluster job an attempt ran as (JSON: scheduler, id, name, nodes, state), on Slurm; rows
# give it back as a dict (``_attempt_row``), updates take one
ADD_JOB = "ALTER TABLE attempts ADD COLUMN job TEXT"
# An attempt that ended "interrupted" (killed, hung, its node or runner lost) is "lost" since
# the run's INTERRUPTED (stopped from outside) took that word: its rows and its events say so.
RENAME_LOST = (
    "UPDATE attempts SET outcome = 'lost' WHERE outcome = 'interrupted'",
    "UPDATE events SET details = json_set(details, '$.outcome', 'lost') WHERE type = "
    "'attempt_ended' AND json_extract(details, '$.outcome') = 'interrupted'",
)


def stage_row(run_id: str, idx: int, name: str, phase: Phase, source: str | None) -> Statement:
    """The statement recording a new run's stage."""
    return (
        "INSERT INTO stages (run_id, idx, name, phase, source_snapshot) VALUES (?, ?, ?, ?, ?)",
        (run_id, idx, name, phase, source),
    )


class AttemptStatements(Connection):
    """Read a run's stages with their attempts; allocate, update and end attempts."""

    def stages(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._rows("SELECT * FROM stages WHERE run_id = ? ORDER BY idx", (run_id,))
        result = []
        for row in rows:
            stage = dict(row)
            stage["attempts"] = self.attempts(run_id, stage["name"])
            result.append(stage)
        return result

    def stages_of(self, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """:meth:`stages` of many runs in two statements (a page of the runs table)."""
        if not run_ids:
            return {}
        marks = ", ".join("?" * len(run_ids))
        found: dict[str, list[dict[str, Any]]] = {run_id: [] for run_id in run_ids}
        by_name: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self._rows(
            f"SELECT * FROM stages WHERE run_id IN ({marks}) ORDER BY run_id, idx", tuple(run_ids)
        ):
            stage = {**dict(row), "attempts": []}
            found[stage["run_id"]].append(stage)
            by_name[(stage["run_id"], stage["name"])] = stage
        for row in self._rows(
            f"SELECT * FROM attempts WHERE run_id IN ({marks}) ORDER BY run_id, stage, number",
            tuple(run_ids),
        ):
            owner = by_name.get((row["run_id"], row["stage"]))
            if owner is not None:
                owner["attempts"].append(_attempt_row(row))
        return found

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
        return [_attempt_row(row) for row in rows]

    def current_attempt(self, run_id: str, stage: str) -> int:
        """The newest attempt number of a stage (0 before the first): the fencing token."""
        row = self._one(
            "SELECT MAX(number) FROM attempts WHERE run_id = ? AND stage = ?", (run_id, stage)
        )
        return row[0] if row and row[0] else 0

    def start_attempt(self, run_id: str, stage: str, **values: Any) -> int:
        """Allocate the next attempt number in one transaction, so two runners never share one."""

        def allocate(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT MAX(number) FROM attempts WHERE run_id = ? AND stage = ?",
                (run_id, stage),
            ).fetchone()
            number = (row[0] or 0) + 1
            fields = {"run_id": run_id, "stage": stage, "number": number, "started_at": now()}
            fields.update(redacted_values(values))
            db.execute(
                f"INSERT INTO attempts ({', '.join(fields)}) VALUES "
                f"({', '.join('?' for _ in fields)})",
                tuple(fields.values()),
            )
            return number

        number = self._immediate(allocate)
        self._changed(run_id)
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
            statements.append(event_row(run_id, stage, number, "attempt_ended", details))
        self._transaction(statements)
        self._changed(run_id)


def _attempt_row(row: sqlite3.Row) -> dict[str, Any]:
    """An attempt as the catalog gives it: its cluster ``job`` read back from its JSON."""
    found = dict(row)
    found["job"] = json.loads(found["job"]) if found.get("job") else None
    return found


def _attempt_update(run_id: str, stage: str, number: int, values: dict[str, Any]) -> Statement:
    values = redacted_values(values)  # no password or secret value in the catalog
    if values.get("job") is not None:  # the cluster job's record, kept as JSON
        values["job"] = json.dumps(values["job"])
    columns = ", ".join(f"{name} = ?" for name in values)
    return (
        f"UPDATE attempts SET {columns} WHERE run_id = ? AND stage = ? AND number = ?",
        (*values.values(), run_id, stage, number),
    )
