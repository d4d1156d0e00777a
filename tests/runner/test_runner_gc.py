"""`nodus gc` and `nodus runs delete` on real runs: expiry, holds, dry runs, a run removed whole.

Runs are driven by the real `nodus` command line; expiry is judged at an injected moment
(``Client.gc(now=...)``), since nobody waits seven days in a test.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime

import pytest
from runner_helpers import Project

from nodus.client import Client
from nodus.schemas import defaults
from nodus.store import open_store
from polling import wait_for

DAY = 86_400.0


def _finished_run(project: Project, retention_days: int = 7, steps: int = 30) -> dict:
    """A SUCCEEDED counter run of ``steps`` steps saving every 10; rotation keeps every save."""
    body = f"[execution]\nkeep_recoverable = 100\nretention_days = {retention_days}\n"
    project.write(steps=steps, save_every=10, sleep=0.04, body=body)
    done = project.nodus("run", str(project.file), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _kill(runner) -> None:
    """SIGKILL the runner: its run is left RUNNING, as after a lost machine."""
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()


def _client(project: Project) -> Client:
    return Client(project.home)


def _finished_at(run: dict) -> float:
    return datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00")).timestamp()


def _store(project: Project):
    return open_store(defaults.store_url(None, str(project.home)))


def _blob_bytes(project: Project) -> int:
    blobs = project.home / "store" / "blobs"
    return sum(path.stat().st_size for path in blobs.rglob("*") if path.is_file())


def test_finished_snapshots_expire_after_retention_days_and_not_before(project):
    run = _finished_run(project, retention_days=2)
    client = _client(project)
    before = client.snapshots(run["id"])
    assert [row["step"] for row in before] == [10, 20, 30]
    finished = _finished_at(run)

    early = client.gc(now=finished + 1 * DAY)
    assert early["expired"] == []
    assert [row["step"] for row in client.snapshots(run["id"])] == [10, 20, 30]

    late = client.gc(now=finished + 2 * DAY + 1)
    assert sorted((item["step"], item["kind"]) for item in late["expired"]) == [
        (10, "files"),
        (20, "files"),
        (30, "files"),
    ]
    assert late["freed_bytes"] > 0
    # Snapshots with no kind left are gone from listings; the run's outputs and source stay.
    assert client.snapshots(run["id"]) == []
    roles = {m.role for m in _store(project).list(run=run["id"], role=None)}
    assert roles == {"source", "outputs"}
    assert _store(project).verify().sound


def test_a_pinned_snapshot_survives_expiry(project):
    run = _finished_run(project, retention_days=0)
    pinned = project.nodus("snapshots", "pin", f"{run['id']}@20")
    assert pinned.returncode == 0, pinned.stderr

    gone = _client(project).gc()
    assert sorted(item["step"] for item in gone["expired"]) == [10, 30]
    rows = _client(project).snapshots(run["id"])
    assert [(row["step"], row["kinds"], row["pinned"]) for row in rows] == [(20, ["files"], True)]
    target = project.root / "restored"
    _client(project).download(f"{run['id']}@20", target, artifact="resumable")
    assert json.loads((target / "state.json").read_text())["step"] == 20


def test_dry_run_reports_and_removes_nothing(project):
    run = _finished_run(project, retention_days=0)
    bytes_before = _blob_bytes(project)

    dry = project.nodus("gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert len(report["expired"]) == 3
    assert [row["step"] for row in _client(project).snapshots(run["id"])] == [10, 20, 30]
    assert _blob_bytes(project) == bytes_before

    real = project.nodus("gc")
    assert real.returncode == 0, real.stderr
    assert "3 expired kind(s)" in real.stdout
    assert _client(project).snapshots(run["id"]) == []
    assert _blob_bytes(project) < bytes_before


def test_an_unfinished_run_keeps_everything(project):
    """A run that can still be resumed (runner SIGKILLed: it is left RUNNING) is never expired."""
    project.write(steps=400, save_every=10, sleep=0.02, body="[execution]\nretention_days = 0\n")
    runner = project.start("run", str(project.file))
    try:
        client = _client(project)
        wait_for(lambda: client.runs() and len(client.snapshots(client.runs()[0]["id"])) >= 2)
        run_id = client.runs()[0]["id"]
    finally:
        _kill(runner)
    report = _client(project).gc(now=1e12)
    assert report["expired"] == []
    assert len(_client(project).snapshots(run_id)) >= 2


def test_runs_delete_removes_a_run_whole_and_leaves_others_sound(project):
    keep = _finished_run(project)
    gone = _finished_run(project, steps=40)
    client = _client(project)
    assert client.get(gone["id"])["stored"]["snapshots"] == 6  # source, 4 saves, outputs
    assert client.get(gone["id"])["stored"]["bytes"] > 0

    deleted = project.nodus("runs", "delete", gone["id"], "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["deleted_snapshots"] == 6

    missing = project.nodus("runs", "get", gone["id"])
    assert missing.returncode != 0 and gone["id"] in missing.stderr
    store = _store(project)
    assert store.list(run=gone["id"], role=None) == []
    assert not (project.home / defaults.WORK_DIR / gone["id"]).exists()
    assert store.verify().sound
    assert [row["step"] for row in client.snapshots(keep["id"])] == [10, 20, 30]
    # Nothing of the deleted run is left for a later sweep: its blobs went with it.
    assert _client(project).gc(now=0)["deleted_blobs"] == 0


def test_runs_delete_refuses_a_pinned_run_and_names_the_snapshot(project):
    run = _finished_run(project)
    assert project.nodus("snapshots", "pin", f"{run['id']}@10").returncode == 0
    refused = project.nodus("runs", "delete", run["id"])
    assert refused.returncode == 2
    assert "pinned" in refused.stderr and "step 10" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert [row["step"] for row in _client(project).snapshots(run["id"])] == [10, 20, 30]


def test_runs_delete_refuses_a_run_that_may_continue(project):
    project.write(steps=400, save_every=10, sleep=0.02)
    runner = project.start("run", str(project.file))
    try:
        client = _client(project)
        wait_for(lambda: len(client.runs()) == 1)
        run_id = client.runs()[0]["id"]
        refused = project.nodus("runs", "delete", run_id)
    finally:
        _kill(runner)
    assert refused.returncode == 2, refused.stderr
    assert "only a finished run is deleted" in refused.stderr


@pytest.mark.parametrize("json_output", [True, False])
def test_runs_get_shows_the_runs_bytes_in_the_store(project, json_output):
    run = _finished_run(project)
    args = ["runs", "get", run["id"], *(["--json"] if json_output else [])]
    shown = project.nodus(*args)
    assert shown.returncode == 0, shown.stderr
    if json_output:
        stored = json.loads(shown.stdout)["stored"]
        assert stored["snapshots"] == 5 and stored["bytes"] > 0
    else:
        assert "store: 5 snapshot(s)" in shown.stdout
