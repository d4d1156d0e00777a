"""Issue 11 points 2 and 3: explicit library collators, and one process under a launcher.

The program passes its collator explicitly, as the Transformers examples do, and runs under
``torchrun --standalone --nproc_per_node 1`` or ``accelerate launch --num_processes 1``: a world
of one process on one device. Under a real `nodus run` its *worker* (the launcher's child, not the
launcher) is SIGKILLed after a committed save; the runner sees the launcher exit and recovers,
and the final weights equal those of an uninterrupted bare run launched the same way. A world of
two uses the ``processes`` extension (tests/hf/test_ext_processes.py): refused while it is not
qualified.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path

import pytest
from hf_helpers import PROGRAMS, bare_run_hash
from runner_e2e_helpers import Project

from nodus.runner.processes import procfs
from nodus.schemas.defaults import ENV_IGNORE_SHIPPED_QUALIFICATIONS as IGNORE_SHIPPED
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROGRAM = "collators.py"
BIN = Path(sys.executable).parent  # torchrun and accelerate come with the interpreter's packages
TORCHRUN = (str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "1")
ACCELERATE = (
    *(str(BIN / "accelerate"), "launch", "--num_processes", "1", "--num_machines", "1"),
    *("--mixed_precision", "no", "--dynamo_backend", "no"),
)
# 2 epochs of 12 steps; saves at 5, 10, 12 (epoch end), 15, 20, 24
ENV = {"QUICKSTART_EPOCHS": "2"}
SAVE_EVERY = 5
# a kill after 5 resumes inside epoch 0, after 12 at its end, after 15 inside epoch 1
KILL_AFTER = (5, 12, 15)


def _bare(tmp_path_factory, collator: str, launcher: tuple = (), env: dict | None = None) -> str:
    root = tmp_path_factory.mktemp(f"bare-{collator}")
    program = str(PROGRAMS / PROGRAM)
    return bare_run_hash(root, program, {**ENV, "COLLATOR": collator, **(env or {})}, launcher)


@pytest.fixture(scope="module")
def bare_default(tmp_path_factory) -> dict[str, str]:
    """Uninterrupted bare runs with default_data_collator: plain python and under torchrun."""
    return {
        "python": _bare(tmp_path_factory, "default"),
        "torchrun": _bare(tmp_path_factory, "default", TORCHRUN),
    }


def _recover_after_worker_kill(tmp_path, collator: str, launcher: tuple) -> tuple[str, str]:
    """Run under nodus, SIGKILL the worker after a random committed save; the outputs' hash."""
    seed = random.randrange(1 << 30)
    after = random.Random(seed).choice(KILL_AFTER)
    why = f"random seed {seed}: the worker killed after the commit of step {after}"
    project = Project(
        tmp_path,
        program=PROGRAM,
        env={**ENV, "COLLATOR": collator},
        launcher=launcher,
        save_every=SAVE_EVERY,
        write_delay="0.5",
    )
    runner = project.start("run", str(project.file), "--key", "k")
    launched = wait_for(lambda: project.running("k", 1), "attempt 1", runner)
    worker = wait_for(lambda: _worker(launched["pid"]), "the launcher's worker", runner)
    wait_for(lambda: after in project.committed_steps("k", 1), f"step {after} committed", runner)
    os.kill(worker, signal.SIGKILL)

    assert runner.wait(timeout=300) == 0, why
    view = project.get("k")
    first, second = view["stages"][0]["attempts"]
    assert (first["outcome"], second["outcome"]) == ("lost", "succeeded"), why
    assert f"process {worker}" in first["detail"] and "SIGKILL" in first["detail"], why
    assert second["restored_step"] == project.committed_steps("k", 1)[-1] >= after, why
    assert not [e for e in view["events"] if e["type"].startswith("integration_")], why
    return project.outputs_hash("k"), why


def _worker(launcher_pid: int) -> int | None:
    """The process the launcher started for the program (its rank 0), once it runs."""
    for entry in procfs.descendants(launcher_pid, procfs.table()):
        if entry.state != "Z" and PROGRAM in procfs.command_line(entry.pid):
            return entry.pid
    return None


def test_torchrun_world_of_one_with_default_data_collator_recovers_bit_identically(
    tmp_path, bare_default
):
    # A world of one is one process: same weights as plain `python train.py`
    assert bare_default["torchrun"] == bare_default["python"]
    outputs, why = _recover_after_worker_kill(tmp_path, "default", TORCHRUN)
    assert outputs == bare_default["torchrun"], why


def test_torchrun_world_of_one_with_padding_collator_recovers_bit_identically(
    tmp_path, tmp_path_factory
):
    bare = _bare(tmp_path_factory, "padding", TORCHRUN)
    outputs, why = _recover_after_worker_kill(tmp_path, "padding", TORCHRUN)
    assert outputs == bare, why


def test_accelerate_launch_of_one_process_saves_at_a_notice_and_resumes_bit_identically(
    tmp_path, tmp_path_factory
):
    # accelerate launch on CPU sets OMP_NUM_THREADS=1: plain python with it trains the same.
    # A preemption notice is answered by the integration itself. (A killed worker, which its
    # launcher reaps at once, is tests/runner/test_runner_launchers.py's: it needs the kernel's
    # process events.)
    bare = _bare(tmp_path_factory, "padding", ACCELERATE)
    assert bare == _bare(tmp_path_factory, "padding", env={"OMP_NUM_THREADS": "1"})
    seed = random.randrange(1 << 30)
    after = random.Random(seed).choice(KILL_AFTER)
    why = f"random seed {seed}: SIGTERM to nodus after the commit of step {after}"
    project = Project(
        tmp_path,
        program=PROGRAM,
        env={**ENV, "COLLATOR": "padding"},
        launcher=ACCELERATE,
        save_every=SAVE_EVERY,
        write_delay="0.5",
    )
    runner = project.start("run", str(project.file), "--key", "n")
    wait_for(lambda: after in project.committed_steps("n", 1), f"step {after} committed", runner)
    runner.send_signal(signal.SIGTERM)

    assert runner.wait(timeout=300) == 3, why
    stopped = project.get("n")["stages"][0]["attempts"][0]
    assert stopped["outcome"] == "preempted", why
    saved = project.committed_steps("n", 1)[-1]
    assert saved >= after, why
    resumed = project.nodus("runs", "resume", "n", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert project.get("n")["stages"][0]["attempts"][1]["restored_step"] == saved, why
    assert project.outputs_hash("n") == bare, why


def test_a_world_of_two_is_refused_naming_its_size_while_not_qualified(tmp_path):
    project = Project(
        tmp_path,
        program=PROGRAM,
        env={**ENV, "COLLATOR": "default"},
        launcher=(*TORCHRUN[:-1], "2"),  # gloo on the CPU: two cheap processes
    )
    # Only this machine's own qualifications count (none): the extension is not qualified.
    proc_ = project.nodus(
        "run", str(project.file), "--key", "w", timeout=300, env={IGNORE_SHIPPED: "1"}
    )

    assert proc_.returncode == 1, proc_.stdout[-3000:] + proc_.stderr[-3000:]
    view = project.get("w")
    assert (view["phase"], view["exit_status"]) == ("FAILED", 1)
    attempts = view["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["failed"]  # a refusal is never retried
    refused = [e for e in view["events"] if e["type"] == "integration_refused"]
    assert refused, view["events"]
    for event in refused:  # every rank refuses for the same reason, naming the command
        (reason,) = [r for r in event["reasons"] if "distributed training" in r]
        assert "distributed training (world_size=2)" in reason
        assert "nodus qualify --extension processes" in reason
    assert "world_size=2" in project.log_of(attempts[0])
    assert not [m for m in project.snapshots("w") if m.files]  # nothing was saved
