"""What a Slurm attempt's job asks for, read from the stage (tables, no cluster):
``slurm_jobs.sbatch_argv`` and ``parse_job``. tests/slurm runs them on a real cluster."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace

import pytest

from nodus.runner.backends.slurm_jobs import JobState, batch_script, parse_job, sbatch_argv
from nodus.schemas.resolved import ResolvedContinuity, ResolvedExecution, ResolvedStage
from polling import wait_for

BASE = [
    "sbatch",
    "--parsable",
    "--job-name=nodus-r-main-1",
    "--output=/f/slurm-%j.out",
    "--nodes=1",
    "--ntasks-per-node=1",
    "--cpus-per-task=1",
    "--signal=B:USR1@300",
    "--requeue",
]


def _stage(**execution) -> ResolvedStage:
    return ResolvedStage(
        name="main",
        command=("python", "train.py"),
        code="/code",
        env={},
        outputs=(),
        integration=None,
        continuity=ResolvedContinuity(
            mode="checkpointed", resume_on_interruption=True, checkpoint_paths=("state",)
        ),
        execution=replace(
            ResolvedExecution(
                save_every=0,
                save_each_epoch=False,
                keep_recoverable=1,
                keep_adapters=1,
                max_recoveries=3,
                grace_period=60.0,
                retention_days=30,
                backend="slurm",
            ),
            **execution,
        ),
    )


@pytest.mark.parametrize(
    ("execution", "options"),
    [
        ({}, []),
        ({"nodes": 2, "cpus": 2.5}, ["--nodes=2", "--cpus-per-task=3"]),
        ({"signal_lead": 90.0}, ["--signal=B:USR1@90"]),
        ({"signal_lead": 0.2}, ["--signal=B:USR1@1"]),  # Slurm's lead is whole seconds, > 0
        ({"memory": 16 * 1024**3}, ["--mem=16384M"]),
        ({"gpu_count": 2}, ["--gpus-per-node=2"]),
        (
            {"partition": "gpu", "account": "ml", "qos": "low"},
            ["--partition=gpu", "--account=ml", "--qos=low"],
        ),
        ({"time_limit": 5400.0}, ["--time=90"]),
        ({"time_limit": 61.0}, ["--time=2"]),  # whole minutes, never shorter than asked
        (
            {"sbatch_options": ("--exclusive", "--constraint=a100")},
            ["--exclusive", "--constraint=a100"],
        ),
    ],
)
def test_the_job_asks_slurm_for_what_the_stage_says(execution, options):
    argv = sbatch_argv(_stage(**execution), "nodus-r-main-1", "/f/slurm-%j.out")
    changed = {option.split("=", 1)[0] for option in options}
    kept = [option for option in BASE if option.split("=", 1)[0] not in changed]
    assert sorted(argv) == sorted(kept + options)
    if "sbatch_options" in execution:  # the user's own come last: they win over nodus's
        assert argv[-len(options) :] == options


@pytest.mark.parametrize(
    ("line", "state"),
    [
        (
            "JobId=7 JobState=RUNNING Reason=None Restarts=0 NodeList=n[1-2] BatchHost=n1",
            JobState("RUNNING", "n[1-2]", 0, "None"),
        ),
        (
            "JobId=8 JobState=PENDING Reason=BeginTime Restarts=1 NodeList=(null)",
            JobState("PENDING", "", 1, "BeginTime"),
        ),
        (
            "JobId=9 JobState=NODE_FAIL Reason=NodeDown NodeList=n1",
            JobState("NODE_FAIL", "n1", 0, "NodeDown"),
        ),
    ],
)
def test_a_jobs_state_is_read_from_scontrol(line, state):
    assert parse_job(line) == state
    assert state.active is (state.state in {"RUNNING", "PENDING"})


def test_the_script_turns_slurms_notice_into_a_file_and_ends_with_its_step(tmp_path):
    """The job's script under bash, with a stand-in ``srun`` that runs its command: Slurm's
    USR1 (to the script alone) leaves the notice file, and the script waits on for the step
    and exits with its status."""
    folder = tmp_path / "a folder"
    folder.mkdir()
    (tmp_path / "srun").write_text('#!/bin/sh\nshift 2\nexec "$@"\n')
    (tmp_path / "srun").chmod(0o755)
    step = 'while [ ! -e "$1/notice" ]; do sleep 0.01; done; exit 7'
    script = batch_script(["sh", "-c", step, "step", str(folder)], str(folder))
    (folder / "job.sh").write_text(script)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    job = subprocess.Popen(["bash", str(folder / "job.sh")], env=env)
    wait_for(lambda: _children_of(job.pid), "the step")
    job.send_signal(signal.SIGUSR1)
    assert job.wait(timeout=30) == 7
    assert (folder / "notice").exists()


def _children_of(pid: int) -> list[str]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return handle.read().split()
