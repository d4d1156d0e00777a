"""The registry's tables in the run catalog: names, version numbers and aliases.

The catalog (``nodus.runner.catalog.core``) applies :data:`SCHEMA`, a tuple of single statements,
as one of its migrations and hands the registry its statement runners (``Catalog.models``), so the
tables are defined here once and the runner's SQLite plumbing (WAL, busy timeout, damaged-catalog
messages) serves both.

A version number is taken in the same statement that records it: ``models.last_version`` only
grows, so a deleted version's number is never given again, and a snapshot already registered
under a name (``UNIQUE (name, snapshot)``) keeps the version it has. Versions come in and go out
as :class:`nodus.store.model_records.ModelVersion` (without their files, which only the store's
record holds); a row of these tables is read and written only here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the catalog imports this module: it does not pay for the store's
    from nodus.store.model_records import ModelVersion

__all__ = ["SCHEMA", "ModelTable"]

# The texts SQLite keeps in sqlite_master, as the first catalogs wrote them (one statement each).
SCHEMA = (
    """CREATE TABLE models (
    name TEXT PRIMARY KEY,
    last_version INTEGER NOT NULL        -- the highest number ever given (never reused)
)""",
    """CREATE TABLE model_versions (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    snapshot TEXT NOT NULL,
    stage TEXT,
    step INTEGER,
    epoch REAL,
    store TEXT NOT NULL,                 -- the store holding the version's record and blobs
    origin TEXT NOT NULL,                -- epoch | run | manual
    run_model INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL,
    registered_at REAL NOT NULL,
    PRIMARY KEY (name, version),
    UNIQUE (name, snapshot)
)""",
    "CREATE INDEX model_versions_run ON model_versions(run_id)",
    "CREATE INDEX model_versions_snapshot ON model_versions(snapshot)",
    """CREATE TABLE model_aliases (
    name TEXT NOT NULL,
    alias TEXT NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (name, alias)
)""",
)

Rows = Callable[[str, tuple[Any, ...]], list[Any]]
Transaction = Callable[[list[tuple[str, tuple[Any, ...]]]], None]

_COLUMNS = (
    "name, version, run_id, snapshot, stage, step, epoch, store, origin, run_model, bytes, "
    "registered_at"
)


class ModelTable:
    """Statements over the registry's tables, run by the catalog's own runners."""

    def __init__(self, rows: Rows, transaction: Transaction) -> None:
        self._rows = rows
        self._transaction = transaction

    # --- versions ---------------------------------------------------------------------------

    def add(self, version: ModelVersion, at_least: int = 1) -> ModelVersion:
        """Record ``version`` (its own number ignored) under the next number, at least
        ``at_least``; the version as recorded, which is the existing one when its snapshot has
        that name already."""
        name, snapshot = version.name, version.snapshot
        fresh = "WHERE NOT EXISTS (SELECT 1 FROM model_versions WHERE name = ? AND snapshot = ?)"
        values = _values(version)
        values = (values[0], *values[2:])  # the number is the table's: last_version
        self._transaction(
            [
                (
                    f"INSERT INTO models (name, last_version) SELECT ?, ? {fresh} "
                    "ON CONFLICT(name) DO UPDATE SET "
                    "last_version = MAX(last_version + 1, excluded.last_version)",
                    (name, at_least, name, snapshot),
                ),
                (
                    f"INSERT OR IGNORE INTO model_versions ({_COLUMNS}) "
                    "SELECT ?, last_version, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
                    "FROM models WHERE name = ?",
                    (*values, name),
                ),
            ]
        )
        found = self.of_snapshot(snapshot, name)
        assert found, f"{name}: {snapshot} was just recorded"
        return found[0]

    def insert(self, version: ModelVersion) -> None:
        """Record a version known from its store record, under its own number (adoption)."""
        self._transaction(
            [
                (
                    "INSERT INTO models (name, last_version) VALUES (?, ?) ON CONFLICT(name) "
                    "DO UPDATE SET last_version = MAX(last_version, excluded.last_version)",
                    (version.name, version.version),
                ),
                (
                    f"INSERT OR IGNORE INTO model_versions ({_COLUMNS}) VALUES "
                    f"({', '.join('?' for _ in _COLUMNS.split(', '))})",
                    _values(version),
                ),
            ]
        )

    def mark_run_model(self, name: str, version: int) -> None:
        self._transaction(
            [
                (
                    "UPDATE model_versions SET run_model = 1 WHERE name = ? AND version = ?",
                    (name, version),
                )
            ]
        )

    def remove(self, name: str, version: int) -> None:
        """The version and every alias pointing at it."""
        where = "WHERE name = ? AND version = ?"
        self._transaction(
            [
                (f"DELETE FROM model_aliases {where}", (name, version)),
                (f"DELETE FROM model_versions {where}", (name, version)),
            ]
        )

    def get(self, name: str, version: int) -> ModelVersion | None:
        rows = self._select("WHERE name = ? AND version = ?", (name, version))
        return rows[0] if rows else None

    def newest(self, name: str) -> ModelVersion | None:
        rows = self._select("WHERE name = ? ORDER BY version DESC LIMIT 1", (name,))
        return rows[0] if rows else None

    def all(self) -> list[ModelVersion]:
        return self._select("ORDER BY name, version", ())

    def of_snapshot(self, snapshot: str, name: str | None = None) -> list[ModelVersion]:
        if name is None:
            return self._select("WHERE snapshot = ? ORDER BY name, version", (snapshot,))
        return self._select("WHERE snapshot = ? AND name = ?", (snapshot, name))

    def of_run(self, run_id: str) -> list[ModelVersion]:
        return self._select("WHERE run_id = ? ORDER BY name, version", (run_id,))

    def names(self) -> list[str]:
        return [row["name"] for row in self._rows("SELECT name FROM models ORDER BY name", ())]

    # --- aliases ----------------------------------------------------------------------------

    def set_alias(self, name: str, alias: str, version: int) -> None:
        """Point ``alias`` at ``version``, moving it if it pointed elsewhere."""
        self._transaction(
            [
                (
                    "INSERT INTO model_aliases (name, alias, version) VALUES (?, ?, ?) "
                    "ON CONFLICT(name, alias) DO UPDATE SET version = excluded.version",
                    (name, alias, version),
                )
            ]
        )

    def alias(self, name: str, alias: str) -> int | None:
        rows = self._rows(
            "SELECT version FROM model_aliases WHERE name = ? AND alias = ?", (name, alias)
        )
        return rows[0]["version"] if rows else None

    def aliases(self, name: str) -> dict[str, int]:
        rows = self._rows(
            "SELECT alias, version FROM model_aliases WHERE name = ? ORDER BY alias", (name,)
        )
        return {row["alias"]: row["version"] for row in rows}

    def _select(self, clause: str, params: tuple[Any, ...]) -> list[ModelVersion]:
        rows = self._rows(f"SELECT * FROM model_versions {clause}", params)
        aliases = {name: self.aliases(name) for name in {row["name"] for row in rows}}
        return [_version(row, aliases[row["name"]]) for row in rows]


def _values(version: ModelVersion) -> tuple[Any, ...]:
    """``version`` as the columns of ``model_versions``, in ``_COLUMNS`` order."""
    v = version
    return (
        v.name,
        v.version,
        v.run,
        v.snapshot,
        v.stage,
        v.step,
        v.epoch,
        v.store,
        v.origin,
        int(v.run_model),
        v.bytes,
        v.registered_at,
    )


def _version(row: Any, aliases: dict[str, int]) -> ModelVersion:
    """The version a ``model_versions`` row records, with those of its model's ``aliases`` that
    point at it."""
    from nodus.store.model_records import ModelVersion

    return ModelVersion(
        name=row["name"],
        version=row["version"],
        run=row["run_id"],
        snapshot=row["snapshot"],
        stage=row["stage"],
        step=row["step"],
        epoch=row["epoch"],
        store=row["store"],
        origin=row["origin"],
        run_model=bool(row["run_model"]),
        bytes=row["bytes"],
        registered_at=row["registered_at"],
        aliases=tuple(alias for alias, number in aliases.items() if number == row["version"]),
    )
