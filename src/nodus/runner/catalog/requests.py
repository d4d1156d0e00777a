"""The ``controls`` and ``pauses`` tables: what other processes ask of a run's runner.

A control request (cancel, pause) is a row another process inserts and the runner's poll loop
picks up, so no process ever signals another one directly. A pause also has a row of its own
that follows it to its end (what ``runs get`` shows and a resume restores).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from nodus.runner.catalog.connection import Connection, now, stamp

# The texts SQLite keeps in sqlite_master, as the first catalogs wrote them (indents included).
CREATE_CONTROLS = """CREATE TABLE controls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        action TEXT NOT NULL,
        args TEXT NOT NULL,
        requested_at TEXT NOT NULL,
        handled_at TEXT
    )"""
CREATE_PAUSES = """CREATE TABLE pauses (
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
    )"""
INDEX_PAUSES = "CREATE INDEX pauses_run ON pauses(run_id, id)"

_INSERT_CONTROL = "INSERT INTO controls (run_id, action, args, requested_at) VALUES (?, ?, ?, ?)"


class RequestStatements(Connection):
    """Ask a run's runner for something, find what is pending, and follow a pause."""

    def request(self, run_id: str, action: str, args: dict[str, Any] | None = None) -> int:
        row_id = self._execute(_INSERT_CONTROL, (run_id, action, json.dumps(args or {}), now()))
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

    def request_pause(self, run_id: str, policy: str, deadline_s: float) -> dict[str, Any]:
        """Record a pause and the control row that hands it to the runner, in one transaction."""
        at = datetime.now(UTC)
        deadline = at + timedelta(seconds=deadline_s)

        def record(db: sqlite3.Connection) -> None:
            args = json.dumps({"policy": policy})
            control = db.execute(_INSERT_CONTROL, (run_id, "pause", args, stamp(at))).lastrowid
            db.execute(
                "INSERT INTO pauses (run_id, control_id, policy, requested_at, deadline,"
                " deadline_s, state) VALUES (?, ?, ?, ?, ?, ?, 'requested')",
                (run_id, control, policy, stamp(at), stamp(deadline), deadline_s),
            )

        self._immediate(record)
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


def _pause(row: sqlite3.Row) -> dict[str, Any]:
    pause = dict(row)
    pause["timed_out"] = bool(pause["timed_out"])
    pause["resources_released"] = bool(pause["resources_released"])
    return pause
