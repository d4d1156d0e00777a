"""Slurm's commands as the Slurm backend uses them: a job's ``sbatch`` line, its state, its end.

What a job is asked for is a pure function of the stage (:func:`sbatch_argv`, tested as a
table); the rest runs Slurm's own commands (``sbatch``, ``scontrol``, ``scancel``) found on the
PATH, with ``SLURM_CONF`` and the rest of the environment as the user has them.

    one task per node          the node relay (:mod:`.slurm_node`); it starts the node runner
    --signal=B:USR1@LEAD       Slurm's notice ahead of the job's end (time limit, preemption
                               with a grace time), to the job's script alone: it leaves a
                               ``notice`` file the node relays pass on (the program saves,
                               commits and stops); a USR1 to every process would kill a program
                               that does not expect it
    --requeue allowed          a requeued job's second start does nothing (:mod:`.slurm_node`):
                               the runner continues the run in a new attempt, never twice
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from nodus.schemas.resolved import ResolvedStage

NOTICE_SIGNAL = "USR1"
"""The signal Slurm sends ``signal_lead`` before a job's end (``sbatch --signal``)."""

ACTIVE = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)
"""Job states in which some of the job may still run or run again (``squeue``'s)."""

_ANSWER_S = 30.0  # how long a Slurm command gets to answer


class SlurmError(Exception):
    """A Slurm command failed; its own words are the message."""


@dataclass(frozen=True)
class JobState:
    """What ``scontrol show job`` says of a job."""

    state: str  # RUNNING, PENDING, COMPLETED, CANCELLED, NODE_FAIL, …
    nodes: str  # its node list ("n[1-2]"), "" while pending
    restarts: int  # how many times it was requeued
    reason: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def sbatch_argv(stage: ResolvedStage, name: str, output: str) -> list[str]:
    """The ``sbatch`` options of an attempt's job (before the script's path)."""
    execution = stage.execution
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--output={output}",
        f"--nodes={execution.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={math.ceil(execution.cpus)}",
        f"--signal=B:{NOTICE_SIGNAL}@{max(1, math.ceil(execution.signal_lead))}",
        "--requeue",
    ]
    if execution.memory:
        argv.append(f"--mem={math.ceil(execution.memory / 1024**2)}M")
    if execution.gpu_count:
        argv.append(f"--gpus-per-node={execution.gpu_count}")
    for flag, value in (
        ("partition", execution.partition),
        ("account", execution.account),
        ("qos", execution.qos),
    ):
        if value:
            argv.append(f"--{flag}={value}")
    if execution.time_limit is not None:
        argv.append(f"--time={max(1, math.ceil(execution.time_limit / 60))}")
    return argv + list(execution.sbatch_options)


NOTICE_FILE = "notice"
"""What the job's script leaves in the attempt's folder when Slurm's ``USR1`` reaches it."""


def batch_script(srun: list[str], folder: str) -> str:
    """The job's script: one node relay per node, through ``srun``; Slurm's notice (to this
    script alone) becomes the ``notice`` file in ``folder``. ``wait`` returns when a trapped
    signal comes, so it waits again until the step ended, and exits with its status."""
    words = " ".join(shlex.quote(word) for word in srun)
    notice = shlex.quote("touch " + shlex.quote(os.path.join(folder, NOTICE_FILE)))
    return (
        "#!/bin/bash\n"
        f"trap {notice} {NOTICE_SIGNAL}\n"
        f"srun --kill-on-bad-exit=0 --ntasks-per-node=1 {words} &\n"
        "step=$!\n"
        'while wait "$step"; status=$?; kill -0 "$step" 2>/dev/null; do :; done\n'
        'exit "$status"\n'
    )


def submit(argv: list[str], script: str) -> str:
    """Submit ``script`` with ``argv``; the job id. SlurmError with sbatch's words if refused."""
    answer = _command([*argv, script])
    return answer.split(";", 1)[0].strip()


def test_only(argv: list[str]) -> None:
    """``sbatch --test-only``: SlurmError with Slurm's words when it would refuse the job."""
    _command([argv[0], "--test-only", *argv[1:], "--wrap=true"])


def state(job: str) -> JobState | None:
    """The job's state; None once Slurm no longer knows it (ended long ago)."""
    try:
        answer = _command(["scontrol", "show", "job", "--oneliner", job])
    except SlurmError as error:
        if "Invalid job id" in str(error):
            return None
        raise
    return parse_job(answer)


def parse_job(line: str) -> JobState:
    """A job's state from ``scontrol show job --oneliner``'s line."""
    fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
    nodes = fields.get("NodeList", "")
    return JobState(
        state=fields.get("JobState", "UNKNOWN"),
        nodes="" if nodes == "(null)" else nodes,
        restarts=int(fields.get("Restarts", "0") or 0),
        reason=fields.get("Reason", "None"),
    )


def named(name: str) -> str | None:
    """The id of the job Slurm knows by ``name`` (nodus names one job per attempt), or None."""
    answer = _command(["squeue", "--noheader", f"--name={name}", "--format=%i"])
    ids = answer.split()
    return ids[-1] if ids else None


def cancel(job: str) -> None:
    """``scancel`` the job (a job already ended: nothing to do)."""
    try:
        _command(["scancel", job])
    except SlurmError:
        return


def node_address(node: str) -> str:
    """The address other nodes reach ``node`` at (its ``NodeAddr``)."""
    answer = _command(["scontrol", "show", "node", "--oneliner", node])
    fields = dict(word.split("=", 1) for word in answer.split() if "=" in word)
    return fields.get("NodeAddr") or node


def reachable() -> str | None:
    """Why no Slurm controller answers here, or None when one does (``scontrol ping``)."""
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        return "Slurm's commands (sbatch, scontrol) are not on this machine's PATH"
    try:
        answer = _command(["scontrol", "ping"])
    except SlurmError as error:
        return str(error)
    if " is UP" not in answer:
        return answer.strip() or "scontrol ping: no controller is UP"
    return None


def _command(argv: list[str]) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=_ANSWER_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"{argv[0]}: {error}") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        errors = [line for line in said if "error" in line.lower()]
        raise SlurmError((errors or said or [f"{argv[0]} exited with {proc.returncode}"])[0])
    return proc.stdout
