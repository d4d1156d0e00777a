"""The catalog's connection: migrations as tuples of statements, run one by one."""

from __future__ import annotations

import sqlite3

import pytest

from nodus.errors import CatalogError
from nodus.runner.catalog import core
from nodus.runner.catalog.connection import Connection

CREATE = "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"


def _read(home, sql: str) -> list[tuple]:
    db = sqlite3.connect(f"{home}/nodus.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_migrations_run_statement_by_statement_up_to_the_newest(tmp_path):
    migrations = {
        1: (CREATE, "INSERT INTO notes (text) VALUES ('first')"),
        2: ("ALTER TABLE notes ADD COLUMN tag TEXT", "UPDATE notes SET tag = 'old'"),
    }
    Connection(str(tmp_path), migrations).close()
    assert _read(tmp_path, "PRAGMA user_version") == [(2,)]
    assert _read(tmp_path, "SELECT text, tag FROM notes") == [("first", "old")]


def test_a_semicolon_inside_a_string_literal_or_a_comment_stays_in_its_statement(tmp_path):
    """What splitting the text on ';' got wrong: it cut these statements in two."""
    migrations = {
        1: (
            "CREATE TABLE notes (\n    text TEXT NOT NULL  -- one; or more\n)",
            "INSERT INTO notes (text) VALUES ('a; b; c')",
        )
    }
    Connection(str(tmp_path), migrations).close()
    assert _read(tmp_path, "SELECT text FROM notes") == [("a; b; c",)]


def test_only_the_migrations_past_the_catalogs_version_run(tmp_path):
    Connection(str(tmp_path), {1: (CREATE,)}).close()
    again = {1: (CREATE,), 2: ("INSERT INTO notes (text) VALUES ('second')",)}
    Connection(str(tmp_path), again).close()  # a second CREATE TABLE would fail
    assert _read(tmp_path, "SELECT text FROM notes") == [("second",)]


def test_a_migration_failing_midway_leaves_the_catalog_at_its_version(tmp_path):
    Connection(str(tmp_path), {1: (CREATE,)}).close()
    two_in_one = {1: (CREATE,), 2: ("INSERT INTO notes (text) VALUES ('x'); SELECT 1",)}
    with pytest.raises(CatalogError, match="one statement at a time"):
        Connection(str(tmp_path), two_in_one)
    assert _read(tmp_path, "PRAGMA user_version") == [(1,)]
    assert _read(tmp_path, "SELECT text FROM notes") == []


def test_a_migration_given_as_one_text_is_refused(tmp_path):
    with pytest.raises(TypeError, match="migration 1 is one text"):
        Connection(str(tmp_path), {1: CREATE})


def test_every_catalog_migration_is_a_tuple_of_statements():
    """The catalog's own history, in the shape the runner runs (a text would run letter by
    letter; each statement runs alone, so two in one text are refused when it opens)."""
    assert sorted(core._MIGRATIONS) == list(range(1, core.SCHEMA_VERSION + 1))
    for statements in core._MIGRATIONS.values():
        assert isinstance(statements, tuple)
        assert all(isinstance(statement, str) for statement in statements)
