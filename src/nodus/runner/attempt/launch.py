"""Launching an attempt's program: its environment, its command as accepted, its start.

The program gets the stage's environment (``NODUS_*``: its run, attempt and control folder),
what it restored (the checkpoint's path and step, and ``[continuity] resume_args`` on its
command), the stage's secrets read from this runner's environment, and the executable and PATH
stored when the run was accepted (whatever PATH this runner has). It starts under a supervisor
of its own (:class:`~nodus.runner.processes.stage_process.StageProcess`), every process of its
tree carrying the attempt's token.
"""

from __future__ import annotations

import os

from nodus import protocol
from nodus.runner.attempt.context import AttemptFacts
from nodus.runner.attempt.prepare import Prepared
from nodus.runner.processes.stage_process import CannotStartError, StageProcess, Supervisor
from nodus.runner.workspace.launch import Launch, python_version
from nodus.runner.workspace.layout import secret_environment, stage_environment
from nodus.stages.directory import restored_checkpoint

__all__ = ["launch"]


def launch(
    facts: AttemptFacts, prepared: Prepared, supervisor: Supervisor | None = None
) -> StageProcess:
    """Start the program of the attempt ``facts`` describes, in the copy ``prepared`` laid out.

    CannotStartError when its executable cannot start, MissingSecretError when a secret the
    stage names is not in this runner's environment: the attempt then fails. ``supervisor``:
    the attempt's own, spawned before its copy was laid out (None: one is spawned now).
    """
    ctx, stage, ws = facts.ctx, facts.stage, facts.ws
    env = stage_environment(ws, stage, ctx.run_id, facts.number, dict(os.environ))
    if prepared.warm_start:
        env[protocol.ENV_WARM_START] = "1"
    restored_env, resume_args = _restored_launch(facts, prepared)
    env.update(restored_env)
    env.update(secret_environment(stage, os.environ))
    command, env = _as_accepted(facts, env)
    process = StageProcess(
        command + resume_args,
        cwd=ws.copy,
        env=env,
        log_path=ws.log_path,
        prefix=stage.name,
        token=facts.token,
        grace_s=stage.execution.grace_period,
        terminal=ctx.terminal,
    )
    process.start(supervisor)
    return process


def _restored_launch(facts: AttemptFacts, prepared: Prepared) -> tuple[dict[str, str], list[str]]:
    """What an attempt that restored a snapshot holding training state adds to the program's
    environment (its step, where its checkpoint lies in the copy) and to its command
    (``[continuity] resume_args``); nothing on a fresh or warm start."""
    restored, continuity = prepared.continued, facts.stage.continuity
    if restored is None or restored.step is None:
        return {}, []
    relative = restored_checkpoint(
        (entry.path for entry in restored.files),
        restored.step,
        continuity.checkpoint_paths,
        continuity.checkpoint_name,
    )
    checkpoint = os.path.join(facts.ws.copy, relative)
    env = {protocol.ENV_RESTORED_CHECKPOINT: checkpoint}
    # A capture's count is no step of the program's: it is never handed over as one.
    step = None if restored.counted else restored.step
    if step is not None:
        env[protocol.ENV_RESTORED_STEP] = str(step)
    return env, protocol.resume_arguments(continuity.resume_args, checkpoint, step)


def _as_accepted(facts: AttemptFacts, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment as accepted: the stored executable and the stored PATH.

    Whatever PATH this runner has (cron's), the program runs as it did when accepted. A run
    accepted before launches were stored runs its command as written.
    """
    launch = facts.ctx.launches.get(facts.stage.name)
    if launch is None:
        return list(facts.stage.command), env
    missing = launch.missing()
    if missing:
        raise CannotStartError(missing)
    _note_interpreter(facts, launch)
    return launch.argv(facts.stage.command), {**env, "PATH": launch.path}


def _note_interpreter(facts: AttemptFacts, launch: Launch) -> None:
    """An interpreter upgraded since acceptance runs on, and the run says so."""
    if launch.python is None:
        return
    now = python_version(launch.executable, launch.path)
    if now is not None and now != launch.python:
        facts.context.event(
            "interpreter_changed",
            {"executable": launch.executable, "accepted": launch.python, "now": now},
        )
