"""Interruptions seen through launchers: a worker killed under `torchrun`, `sh -c` or
`accelerate launch`.

The test SIGKILLs the worker, as the OOM killer would; the launcher then exits non-zero. nodus
sees the whole tree, so the attempt is an interruption naming the killed process and signal,
the run recovers, and it ends with the result of an uninterrupted run.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path

import pytest
from runner_helpers import committed_steps, token_carriers

from nodus.runner.processes import procevents
from nodus.testing.counter import expected_value
from polling import wait_for

STEPS, SAVE_EVERY, SLEEP = 300, 10, 0.01
COUNTER = ["-m", "nodus.testing.counter", "--steps", str(STEPS), "--save-every", str(SAVE_EVERY)]
COUNTER += ["--sleep", str(SLEEP)]
TORCHRUN = Path(sys.executable).with_name("torchrun")
ACCELERATE = Path(sys.executable).with_name("accelerate")
LAUNCHERS = ("torchrun", "accelerate")


def _process_events_open() -> bool:
    events = procevents.open_events()
    if events is not None:
        events.close()
    return events is not None


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torch (torchrun) is not installed")
def test_a_worker_sigkilled_under_torchrun_is_recovered_like_a_direct_kill(project):
    launcher = [str(TORCHRUN), "--standalone", "--nproc_per_node", "1", *COUNTER]
    _recovers_after_the_worker_is_killed(project, launcher, "torchrun")


def test_a_worker_sigkilled_under_sh_c_is_recovered_like_a_direct_kill(project):
    # `; exit $?` keeps the shell as the worker's parent: it reaps the worker at once and
    # exits 137, which is all there is to see of the worker's death.
    launcher = ["sh", "-c", shlex.join([sys.executable, *COUNTER]) + "; exit $?"]
    _recovers_after_the_worker_is_killed(project, launcher, "sh")


@pytest.mark.skipif(not ACCELERATE.exists(), reason="accelerate is not installed")
@pytest.mark.skipif(
    not _process_events_open(),
    reason="the kernel's process events need CAP_NET_ADMIN in the initial namespaces: without "
    "them a worker that accelerate launch reaps at once cannot be told from a failing one",
)
def test_a_worker_sigkilled_under_accelerate_launch_is_recovered_like_a_direct_kill(project):
    # Its launcher blocks in waitpid: it reaps the worker at once and exits 1; the kernel's
    # exit event tells that the worker was killed. (On a loaded machine the supervisor's scan
    # may read the worker's zombie first, before the launcher reaps it: the same wait status.)
    options = ["--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no"]
    launcher = [str(ACCELERATE), "launch", *options, "--dynamo_backend", "no", *COUNTER]
    events = _recovers_after_the_worker_is_killed(project, launcher, "accelerate")
    assert events[0]["evidence"] in ("process_events", "process_status")
    assert events[0]["exit_status"] == 1


def _recovers_after_the_worker_is_killed(project, launcher: list[str], key: str) -> list[dict]:
    project.write(command=launcher)
    runner = project.start("run", "workload.toml", "--key", key)
    runner.log_path = os.devnull
    run_id = wait_for(
        lambda: project.home.exists() and project.catalog().find_by_key(key), "the run"
    ).id
    wait_for(lambda: committed_steps(project, run_id), "a first snapshot", runner)
    worker = wait_for(lambda: _worker(run_id), "the worker", runner)
    os.kill(worker, signal.SIGKILL)
    _, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, err
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    run = project.get(run_id)
    first, second = run["stages"][0]["attempts"]
    assert first["outcome"] == "lost" and second["outcome"] == "succeeded"
    assert f"process {worker} " in first["detail"] and "SIGKILL" in first["detail"]
    assert second["restored_step"] is not None  # recovered from a snapshot, not restarted
    killed = [e for e in run["events"] if e["type"] == "process_killed"]
    assert [(e["pid"], e["signal"], e["attempt"]) for e in killed] == [(worker, "SIGKILL", 1)]
    assert "nodus.testing.counter" in killed[0]["command"]
    return killed


def _worker(run_id: str) -> int | None:
    """The counter process under the launcher (not the launcher, whose command names it too)."""
    for pid, command in token_carriers(run_id).items():
        words = command.split()
        launcher = any(name in word for word in words[:2] for name in LAUNCHERS)
        if (
            "nodus.testing.counter" in words
            and not launcher
            and os.path.basename(words[0]).startswith("python")
        ):
            return pid
    return None
