"""What `nodus run`, `runs resume` and `runs wait` say as it happens: a line per interruption and
per recovery, a line per committed snapshot when asked, and a stopped run's last line naming the
command that continues it."""

from __future__ import annotations

import os
import signal

from runner_helpers import FAST, catches, committed_steps, kill_program, running_attempt

import doc_samples
from nodus import Client
from polling import wait_for

STEPS, SAVE_EVERY, SLEEP = 200, 10, 0.01


def _said(stderr: str) -> list[str]:
    return [
        line.removeprefix("nodus: ") for line in stderr.splitlines() if line.startswith("nodus:")
    ]


def _command(project, run_id: str) -> str:
    """The stage's command as the narration shows it (cut at 60 characters)."""
    words = project.catalog().get_run(run_id).workload["stages"][0]["command"]
    text = " ".join(words)
    return text if len(text) <= 60 else text[:59] + "…"


def _run_id(project, key: str) -> str | None:
    run = project.catalog().find_by_key(key)
    return run.id if run else None


def test_a_killed_program_is_said_with_the_snapshot_its_recovery_restores(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    runner = project.start("run", "workload.toml")  # no key: as docs/cli.md's sample shows
    run_id = wait_for(lambda: next(iter(project.catalog().list_runs()), None), "the run").id
    wait_for(lambda: committed_steps(project, run_id), what="a first snapshot")
    kill_program(project, run_id)
    project.done_killing()
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    first, second = project.catalog().attempts(run_id, "main")
    command = _command(project, run_id)
    everything = _said(err)
    said = [line for line in everything if "committed (" not in line]
    told = [
        f"attempt 1 lost (pid {first['pid']}: {command}): killed by SIGKILL, which nodus "
        "did not send",
        f"restoring step {second['restored_step']} ({second['restored_snapshot']}) → attempt 2",
        f"{run_id} SUCCEEDED",
    ]
    assert said[0].startswith(f"accepted {run_id}")
    assert said[-3:] == told, said
    doc_samples.check("narration", err.replace(command, "python train.py"))  # the sample's
    # stderr is no terminal (as in a cron job's log): each committed snapshot is said all the same,
    # attempt 2's after the line of the restore that started it
    committed = [i for i, line in enumerate(everything) if "committed (" in line]
    assert committed and everything[committed[-1]].startswith("snapshot of step ")
    restoring = everything.index(told[1])
    assert all(
        int(everything[i].split()[3]) > second["restored_step"] for i in committed if i > restoring
    )
    waited = project.nodus("runs", "wait", run_id)  # tells the run's story so far, then its end
    assert _said(waited.stderr) == told[:2] and waited.stdout.strip() == f"{run_id} SUCCEEDED"


def test_an_interrupted_run_ends_with_the_command_that_continues_it(project):
    project.write(
        steps=STEPS, save_every=1000, sleep=SLEEP, extra_args=("--save-on-term",), gated=True
    )
    runner = project.start("run", "workload.toml", "--key", "pre")
    run_id = wait_for(lambda: _run_id(project, "pre"), what="the run")
    attempt = wait_for(lambda: running_attempt(project.catalog(), run_id), what="the program")
    # Only once the program catches SIGTERM does it save on it (the resume then restores a step)
    wait_for(lambda: catches(attempt["pid"], signal.SIGTERM), what="its SIGTERM handler")
    os.kill(runner.pid, signal.SIGTERM)  # a preemption notice
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 3
    continues = f"`nodus runs resume {run_id}` continues it"
    assert _said(err)[-1].startswith(f"{run_id} INTERRUPTED") and _said(err)[-1].endswith(continues)
    waited = project.nodus("runs", "wait", run_id)
    assert waited.stdout.strip().endswith(continues)
    project.done_killing()
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    second = project.get(run_id)["stages"][0]["attempts"][1]
    assert (
        f"restoring step {second['restored_step']} ({second['restored_snapshot']}) → attempt 2"
        in (_said(resumed.stderr))
    )


def test_the_sdk_says_each_committed_snapshot_when_asked(project, monkeypatch):
    project.write(steps=40, save_every=SAVE_EVERY)
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("NODUS_STORE", raising=False)
    said: list[str] = []
    with open(os.devnull, "w") as quiet:
        client = Client(project.home, output=quiet, say=said.append, say_snapshots=True)
        run = client.run(str(project.file))
    assert run["phase"] == "SUCCEEDED"
    events = project.catalog().events(run["id"], types=("snapshot_committed",))
    expected = [
        f"snapshot of step {e['details']['step']} committed ({e['details']['snapshot']})"
        for e in events
    ]
    assert expected and [line for line in said if line.startswith("snapshot of step")] == expected


# --- the background runner's log: the same lines as a foreground run's stderr ------------------


def _runner_log(project, run_id: str) -> str:
    path = project.home / "work" / run_id / "runner.log"
    return path.read_text() if path.exists() else ""


def _ended_log(project, run_id: str) -> list[str]:
    """What the detached runner's log says, once it says how the run ended (its last line)."""

    def ended() -> list[str] | None:
        said = _said(_runner_log(project, run_id))
        phase = project.get(run_id)["phase"]
        return said if said[-1:] == [f"{run_id} {phase}"] else None

    return wait_for(ended, what="the background runner's last line")


def _snapshot_lines(project, run_id: str) -> list[str]:
    """A line per ``snapshot_committed`` event of the catalog, as the narration says it."""
    events = project.catalog().events(run_id, types=("snapshot_committed",))
    return [
        f"snapshot of step {e['details']['step']} committed ({e['details']['snapshot']})"
        for e in events
    ]


def test_a_detached_runs_log_says_each_committed_snapshot_and_how_it_ended(project):
    project.write(steps=40, save_every=SAVE_EVERY, sleep=0.05)
    handed = project.nodus("run", "workload.toml", "--key", "bg", "--detach")
    assert handed.returncode == 0, handed.stderr
    run_id = project.get("bg")["id"]
    said = _ended_log(project, run_id)
    assert project.get(run_id)["phase"] == "SUCCEEDED"
    expected = _snapshot_lines(project, run_id)
    assert expected and [s for s in said if s.startswith("snapshot of")] == expected
    assert said[-1] == f"{run_id} SUCCEEDED"


def test_a_detached_runs_log_says_the_kill_and_the_restore_that_recovered_it(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    handed = project.nodus("run", "workload.toml", "--detach")
    assert handed.returncode == 0, handed.stderr
    run_id = project.catalog().list_runs()[0].id
    kill_program(project, run_id, after_step=0)
    project.done_killing()
    said = _ended_log(project, run_id)
    first, second = project.catalog().attempts(run_id, "main")
    lost = (
        f"attempt 1 lost (pid {first['pid']}: {_command(project, run_id)}): killed by SIGKILL, "
        "which nodus did not send"
    )
    restoring = (
        f"restoring step {second['restored_step']} ({second['restored_snapshot']}) → attempt 2"
    )
    assert [s for s in said if "committed (" not in s] == [lost, restoring, f"{run_id} SUCCEEDED"]
    assert [s for s in said if s.startswith("snapshot of")] == _snapshot_lines(project, run_id)
    # attempt 2's snapshots are said after the restore that started it, as on a terminal
    after = [int(s.split()[3]) for s in said[said.index(restoring) :] if s.startswith("snapshot")]
    assert after and all(step > second["restored_step"] for step in after)


def test_a_quiet_detached_runs_log_has_no_snapshot_lines(project):
    project.write(steps=40, save_every=SAVE_EVERY)
    handed = project.nodus("run", "workload.toml", "--key", "bg", "--detach", "--quiet")
    assert handed.returncode == 0, handed.stderr
    run_id = project.get("bg")["id"]
    said = _ended_log(project, run_id)
    assert _snapshot_lines(project, run_id)  # committed, not said
    assert said == [f"{run_id} SUCCEEDED"]
