"""The ``events`` table: a run's log, in order (what ``runs get`` and ``runs wait`` read).

Other tables' writes that announce themselves (a new run, a phase, an attempt's end) put their
event in the same transaction, with :func:`event_row`.
"""

from __future__ import annotations

import json
from typing import Any

from nodus.errors import redacted_values
from nodus.runner.catalog.connection import Connection, Statement, now

# The texts SQLite keeps in sqlite_master, as the first catalogs wrote them (indents included).
CREATE_EVENTS = """CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        stage TEXT,
        attempt INTEGER,
        type TEXT NOT NULL,
        at TEXT NOT NULL,
        details TEXT NOT NULL
    )"""
INDEX_EVENTS = "CREATE INDEX events_run ON events(run_id, id)"


def event_row(
    run_id: str, stage: str | None, attempt: int | None, type_: str, details: dict[str, Any]
) -> Statement:
    """The statement recording one event, stamped now."""
    return (
        "INSERT INTO events (run_id, stage, attempt, type, at, details) VALUES (?, ?, ?, ?, ?, ?)",
        # a URL's password in an error's text is never recorded (docs/security.md)
        (run_id, stage, attempt, type_, now(), json.dumps(redacted_values(details), default=str)),
    )


class EventStatements(Connection):
    """Write and read a run's events."""

    def add_event(
        self,
        run_id: str,
        type_: str,
        details: dict[str, Any] | None = None,
        *,
        stage: str | None = None,
        attempt: int | None = None,
    ) -> None:
        sql, params = event_row(run_id, stage, attempt, type_, details or {})
        self._execute(sql, params)

    def has_event(self, run_id: str, type_: str) -> bool:
        """Whether ``run_id``'s log holds an event of ``type_`` (without reading the log)."""
        rows = self._rows(
            "SELECT 1 FROM events WHERE run_id = ? AND type = ? LIMIT 1", (run_id, type_)
        )
        return bool(rows)

    def newest_events(self, run_ids: list[str], type_: str) -> dict[str, dict[str, Any]]:
        """Each run's newest event of ``type_`` (runs without one are left out)."""
        if not run_ids:
            return {}
        marks = ", ".join("?" * len(run_ids))
        rows = self._rows(
            "SELECT * FROM events WHERE id IN (SELECT max(id) FROM events "
            f"WHERE run_id IN ({marks}) AND type = ? GROUP BY run_id)",
            (*run_ids, type_),
        )
        return {row["run_id"]: {**dict(row), "details": json.loads(row["details"])} for row in rows}

    def events(
        self, run_id: str, after: int = 0, types: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """The run's events after ``after``, oldest first; only ``types`` when given."""
        sql = "SELECT * FROM events WHERE run_id = ? AND id > ?"
        if types:
            sql += f" AND type IN ({', '.join('?' * len(types))})"
        rows = self._rows(f"{sql} ORDER BY id", (run_id, after, *types))
        return [{**dict(row), "details": json.loads(row["details"])} for row in rows]
