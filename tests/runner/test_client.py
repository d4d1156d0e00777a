"""`nodus.Client` against a real home: the same runs, snapshots and answers as the command line.

Runs are driven for real, in this process (``run`` without ``detach``) or by a background runner;
every dict the Client returns is compared with the ``--json`` output of the matching command.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import pytest
from runner_helpers import FAST, committed_steps, running_attempt

import nodus
from nodus.errors import NodusError, NotFoundError, UsageError, WaitTimeoutError, WorkloadError
from nodus.schemas.units import human_bytes
from nodus.testing.counter import expected_value
from polling import wait_for


@pytest.fixture
def notes() -> list[str]:
    """What the Client said it was doing."""
    return []


@pytest.fixture
def output() -> io.StringIO:
    """The program output of runs the Client drives in this process."""
    return io.StringIO()


@pytest.fixture
def client(project, monkeypatch, notes, output):
    """A Client on the project's home (and its default store), with the tests' fast settling."""
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STORE", raising=False)
    with nodus.Client(project.home, output=output, say=notes.append) as client:
        yield client


def _cli_json(project, *args: str):
    proc = project.nodus(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_file_run_through_the_client_answers_as_the_command_line_does(
    project, client, notes, output, tmp_path
):
    # saves settle: several snapshots, all kept whole (this is about listings, not retention)
    project.write(steps=20, save_every=5, sleep=0.1, body="[execution]\nkeep_recoverable = 10\n")
    run = client.run(project.file, key="sdk")
    assert (run["phase"], run["exit_status"]) == ("SUCCEEDED", 0)
    assert "[main] counter: done at step 20" in output.getvalue()
    source = client.get("sdk")["stages"][0]["source_snapshot"]
    size = human_bytes(project.store().get(source).total_bytes)
    assert notes[0] == f"accepted {run['id']} under key 'sdk' (source {size} in 1 file)"
    assert notes[-1] == f"{run['id']} SUCCEEDED"
    assert project.result(run["id"]) == {"steps": 20, "value": expected_value(20)}

    assert run == client.get("sdk") == _cli_json(project, "runs", "get", "sdk")
    assert client.runs() == _cli_json(project, "runs", "list")
    rows = client.snapshots("sdk", sort="step", reverse=True)
    steps = [row["step"] for row in rows]
    assert len(steps) > 1 and steps == sorted(committed_steps(project, run["id"]), reverse=True)
    assert rows == _cli_json(project, "runs", "snapshots", "sdk", "--sort", "step", "--reverse")

    newest = f"{run['id']}@{rows[0]['step']}"
    mine = client.download(newest, tmp_path / "mine", artifact="resumable")
    to = str(tmp_path / "cli")
    theirs = _cli_json(
        project, "snapshots", "download", newest, "--to", to, "--artifact", "resumable"
    )
    assert mine["files"] and mine == {**theirs, "to": str(tmp_path / "mine")}
    assert (tmp_path / "mine" / "state.json").read_text() == (
        tmp_path / "cli" / "state.json"
    ).read_text()

    again = client.run(project.file, key="sdk")  # a finished key is reported, not rerun
    assert again == run and "has already finished: SUCCEEDED" in notes[-1]


def test_a_workload_built_in_python_runs_from_the_current_folder(project, client, monkeypatch):
    workload = nodus.Workload(
        name="built",
        command=[
            sys.executable,
            "-m",
            "nodus.testing.counter",
            "--steps",
            "6",
            "--save-every",
            "3",
        ],
        outputs=["out"],
    )
    monkeypatch.chdir(project.root)
    run = client.run(workload)
    assert (run["name"], run["phase"], run["key"]) == ("built", "SUCCEEDED", None)
    assert project.result(run["id"]) == {"steps": 6, "value": expected_value(6)}


def test_pause_wait_resume_and_cancel_through_the_client(project, client):
    project.write(steps=100000, save_every=10, sleep=0.01, extra_args=("--save-on-term",))
    handed = client.run(project.file, key="bg", detach=True)
    assert handed["exit_status"] is None
    assert handed["runner"] == {"pid": None, "host": None, "state": "queued"}
    wait_for(lambda: committed_steps(project, handed["id"]), what="a snapshot")

    pause = client.pause("bg", checkpoint="save", deadline="5m")
    assert (pause["policy"], pause["state"]) in {("save", "pausing"), ("save", "paused")}
    paused = client.wait("bg")
    assert (paused["phase"], paused["exit_status"]) == ("PAUSED", 3)
    assert paused["pause"]["state"] == "paused"
    assert paused["pause"] == _cli_json(project, "runs", "get", "bg")["pause"]

    resumed = client.resume("bg", detach=True)  # queued for its runner: no longer PAUSED
    assert (resumed["phase"], resumed["exit_status"]) == ("QUEUED", None)
    with pytest.raises(WaitTimeoutError, match="is still") as timed_out:
        client.wait("bg", timeout=0.2)
    assert isinstance(timed_out.value, TimeoutError) and timed_out.value.exit_status == 1
    wait_for(
        lambda: (running_attempt(project.catalog(), handed["id"]) or {}).get("number") == 2,
        what="the resumed attempt",
    )

    cancelled = client.cancel("bg")
    assert (cancelled["phase"], cancelled["exit_status"]) == ("CANCELLED", 4)
    assert client.wait("bg")["phase"] == "CANCELLED"
    wait_for(lambda: client.get("bg")["runner"]["pid"] is None, what="the runner to leave")
    assert client.get("bg") == _cli_json(project, "runs", "get", "bg")
    with pytest.raises(UsageError, match=r"already finished \(CANCELLED\)"):
        client.cancel("bg")


def test_mistakes_raise_nodus_errors_with_the_command_line_exit_status(project, client, tmp_path):
    with pytest.raises(NotFoundError) as unknown:
        client.get("no-such-run")
    assert unknown.value.exit_status == 2
    (tmp_path / "bad.toml").write_text('name = "bad"\n')
    with pytest.raises(WorkloadError):
        client.run(tmp_path / "bad.toml")

    project.write(steps=5, save_every=5)
    run = client.run(project.file)
    with pytest.raises(UsageError, match="--checkpoint 'later'"):
        client.pause(run["id"], checkpoint="later")
    with pytest.raises(UsageError, match="positive"):
        client.pause(run["id"], deadline=-1)
    with pytest.raises(UsageError, match=r"already finished \(SUCCEEDED\)"):
        client.pause(run["id"])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        client.download(f"{run['id']}@5", tmp_path / "full", artifact="resumable")

    raised: list[BaseException] = []
    thread = threading.Thread(target=lambda: _catch(raised, client.run, project.file))
    thread.start()
    thread.join()
    assert isinstance(raised[0], UsageError) and "main thread" in str(raised[0])
    assert all(isinstance(error, NodusError) for error in raised)


def _catch(into: list, call, *args) -> None:
    try:
        call(*args)
    except BaseException as error:  # the test asserts on what was raised
        into.append(error)


def test_a_background_runner_leaves_alone_a_run_dealt_with_before_it_started(project, client):
    """Between a detached claim and its runner taking the lock, a cancel (or a foreground
    rerun) may end the run; the background runner then finds it no longer QUEUED."""
    project.write(steps=20, save_every=5, extra_args=("--fail-at", "3"))
    failed = client.run(project.file)
    assert failed["phase"] == "FAILED"
    late = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodus.cli.background",
            failed["id"],
            "--home",
            str(project.home),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert late.returncode == 1 and "not driving it" in late.stdout
    assert client.get(failed["id"]) == failed  # no new attempt, not even a phase event


def test_a_run_refused_or_found_finished_leaves_no_process_behind(project, client, tmp_path):
    """No call leaves a process of its own behind: a refused workload, a key's finished run
    (whose program never starts again), a run driven to its end."""
    # What this worker already runs for other tests (a `nodus ui` a session fixture keeps).
    before = frozenset(_children())
    (tmp_path / "bad.toml").write_text('name = "bad"\n')
    with pytest.raises(WorkloadError):
        client.run(tmp_path / "bad.toml")
    assert _children(but=before) == {}
    project.write(steps=5, save_every=5)
    first = client.run(project.file, key="once")
    assert _children(but=before) == {}
    again = client.run(project.file, key="once")
    assert again["id"] == first["id"] and len(again["stages"][0]["attempts"]) == 1
    assert _children(but=before) == {}


def _children(but: frozenset[int] = frozenset()) -> dict[int, str]:
    """{pid: state and command line} of this process's children, reaped or not, but ``but``."""
    found = {}
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as handle:
                children = handle.read().split()
        except FileNotFoundError:
            continue  # a thread that ended since the listing (its children are reparented)
        for pid in children:
            if int(pid) in but:
                continue
            try:
                with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/cmdline") as line:
                    found[int(pid)] = stat.read().rsplit(")", 1)[1].split()[0] + line.read()
            except OSError:
                continue  # gone meanwhile
    return found
