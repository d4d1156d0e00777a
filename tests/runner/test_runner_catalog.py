"""The run catalog: schema versions, several processes at once, and a damaged or locked file."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from nodus.errors import CatalogError, NotFoundError
from nodus.runner.catalog import connection
from nodus.runner.catalog.core import SCHEMA_VERSION, Catalog
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from run_phases import move_to

WORKLOAD = {"name": "w", "stages": []}


def make_run(catalog: Catalog, key: str | None = None) -> str:
    return catalog.create_run(
        name="w", workload=WORKLOAD, store="memory://", key=key, lock_name="l", stage_names=["main"]
    )


def test_new_catalog_is_at_the_current_schema_version_in_wal_mode(tmp_path):
    catalog = Catalog(str(tmp_path))
    db = sqlite3.connect(catalog.path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_runs_are_found_by_id_or_key_and_unknown_names_are_refused(tmp_path):
    catalog = Catalog(str(tmp_path))
    run_id = make_run(catalog, key="nightly")
    assert catalog.get_run("nightly").id == run_id
    assert catalog.get_run(run_id).stages[0]["name"] == "main"
    with pytest.raises(NotFoundError, match="no run with id or key 'nope'"):
        catalog.get_run("nope")


def test_unfinished_runs_leave_out_only_those_stopped_for_good(tmp_path):
    """What a rotation pass asks for every commit: paused and interrupted runs may go on."""
    catalog = Catalog(str(tmp_path))
    phases = [Phase.RUNNING, Phase.SUCCEEDED, Phase.PAUSED, Phase.FAILED, Phase.INTERRUPTED]
    runs = {}
    for phase in [*phases, Phase.CANCELLED]:
        runs[phase] = make_run(catalog)
        move_to(catalog, runs[phase], phase)
    unfinished = {run.phase: run.id for run in catalog.unfinished_runs()}
    assert unfinished == {p: runs[p] for p in (Phase.RUNNING, Phase.PAUSED, Phase.INTERRUPTED)}


def test_attempt_numbers_are_never_shared_between_processes(tmp_path):
    run_id = make_run(Catalog(str(tmp_path)))
    script = (
        "import sys; from nodus.runner.catalog.core import Catalog; c = Catalog(sys.argv[1]);"
        "[c.start_attempt(sys.argv[2], 'main') for _ in range(25)]"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), run_id]) for _ in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    numbers = [a["number"] for a in Catalog(str(tmp_path)).attempts(run_id, "main")]
    assert numbers == list(range(1, 101))


# Forked from a fresh interpreter that holds only the catalog: forked from a pytest worker that
# has imported the ML stack, the 160 processes took 15-18 s, against under 2 s from here
# (docs/benchmarks.md, "The test suite").
OPEN_AT_ONCE = """
import json, multiprocessing, sys
from nodus.errors import CatalogError
from nodus.runner.catalog.core import Catalog

def open_when_released(home, barrier, failures):
    barrier.wait()
    try:
        Catalog(home)
    except CatalogError as error:
        failures.put(str(error))

context = multiprocessing.get_context("fork")
failures = context.Queue()
for index in range(40):
    barrier = context.Barrier(4)
    home = f"{sys.argv[1]}/home-{index}"
    procs = [
        context.Process(target=open_when_released, args=(home, barrier, failures))
        for _ in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    found = []
    while not failures.empty():
        found.append(failures.get())
    print(json.dumps({"exit codes": [proc.exitcode for proc in procs], "failures": found}))
"""


def test_processes_opening_a_new_catalog_at_once_all_get_it(tmp_path):
    # `nodus run` creating its home while `nodus runs list` looks: SQLite refuses the second
    # switch to WAL at once, without its busy timeout, unless nodus waits for it.
    proc = subprocess.run(
        [sys.executable, "-c", OPEN_AT_ONCE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rounds = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rounds) == 40, proc.stdout[-3000:]
    for found in rounds:
        assert found["exit codes"] == [0, 0, 0, 0]
        assert not found["failures"], found["failures"][0]


def test_a_catalog_from_a_newer_nodus_is_refused(tmp_path):
    Catalog(str(tmp_path))
    db = sqlite3.connect(tmp_path / "nodus.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    with pytest.raises(CatalogError, match="upgrade nodus"):
        Catalog(str(tmp_path))


def test_a_damaged_catalog_says_how_to_move_it_aside(tmp_path):
    (tmp_path / "nodus.db").write_bytes(b"this is not a database" * 100)
    proc = subprocess.run(
        [sys.executable, "-m", "nodus", "runs", "list", "--home", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "damaged" in proc.stderr and "mv " in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_locked_catalog_says_what_to_do(tmp_path, monkeypatch):
    catalog = Catalog(str(tmp_path))
    holder = sqlite3.connect(catalog.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(connection, "CATALOG_BUSY_TIMEOUT_S", 0.1)
    with pytest.raises(CatalogError, match=r"locked by another process.*retry"):
        make_run(Catalog(str(tmp_path)))
    holder.execute("ROLLBACK")


def test_control_requests_are_seen_once_by_the_runner(tmp_path):
    catalog = Catalog(str(tmp_path))
    run_id = make_run(catalog)
    Catalog(str(tmp_path)).request(run_id, "cancel")  # another process's connection
    pending = list(catalog.pending_controls(run_id))
    assert [c["action"] for c in pending] == ["cancel"]
    catalog.mark_handled(pending[0]["id"])
    assert list(catalog.pending_controls(run_id)) == []


def test_a_catalog_whose_attempts_ended_interrupted_reads_them_as_lost(tmp_path):
    """Migration 6: the attempt outcome "interrupted" became "lost" (the run's INTERRUPTED keeps
    the word); a catalog written before says "lost" in its rows and its events once opened."""
    catalog = Catalog(str(tmp_path))
    run_id = make_run(catalog)
    number = catalog.start_attempt(run_id, "main")
    catalog.end_attempt(run_id, "main", number, AttemptOutcome.LOST, "killed", announce=True)
    db = sqlite3.connect(catalog.path)
    with db:  # as nodus wrote it before the rename
        db.execute("UPDATE attempts SET outcome = 'interrupted'")
        db.execute(
            "UPDATE events SET details = json_set(details, '$.outcome', 'interrupted') "
            "WHERE type = 'attempt_ended'"
        )
        db.execute("ALTER TABLE attempts DROP COLUMN job")  # migration 7 came after
        db.execute("PRAGMA user_version = 5")
    db.close()
    reopened = Catalog(str(tmp_path))
    assert [a["outcome"] for a in reopened.attempts(run_id, "main")] == [AttemptOutcome.LOST]
    ended = reopened.events(run_id, types=("attempt_ended",))
    assert [e["details"]["outcome"] for e in ended] == ["lost"]
    # a store record written by an older nodus still names it so: read as lost
    assert AttemptOutcome("interrupted") is AttemptOutcome.LOST
