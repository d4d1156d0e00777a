"""Decide, when a Trainer is built, whether it runs prepared, unprepared, or not at all.

Explicit ``hf-trainer-v1`` refuses a program outside the profile or an environment that is not
qualified (for the profile, and for each extension of it the program uses), listing every reason
and the ways forward that fit it (event ``integration_refused``, non-zero exit). ``auto`` runs
such a program unprepared and records why (event ``integration_unprepared``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from nodus import protocol
from nodus.stages.hf.inprocess import own_saves, profile
from nodus.stages.hf.inprocess.channel import ControlDir
from nodus.stages.hf.inprocess.session import Session, refuse
from nodus.stages.hf.qualification import (
    current_versions,
    is_qualified,
    unqualified_extension_reasons,
    unqualified_extensions,
    unqualified_reason,
)


def prepare(trainer: Any, given: dict[str, Any]) -> None:
    control = ControlDir.from_environment()
    settings = control.settings()
    reasons, used = _assess(trainer, given)
    outside = bool(reasons)
    versions = current_versions()
    home = settings.home or None
    environment, to_qualify = False, []
    if not settings.qualifying:
        environment = not is_qualified(versions, home)
        if environment:
            reasons.append(unqualified_reason(versions))
        device = trainer.args.device.type
        to_qualify = unqualified_extensions(versions, home, used, device)
        reasons += unqualified_extension_reasons(versions, home, used, device)
    if reasons and settings.explicit:
        ways = None  # nodus's own managed-method program: nothing of the user's to change
        if protocol.ENV_METHOD not in os.environ:
            methods = profile.trl_methods(type(trainer))
            ways = profile.ways_forward(to_qualify, environment, methods, outside)
        refuse(control, reasons, ways=ways)
    if reasons:
        control.write_event(protocol.EVENT_UNPREPARED, {"reasons": reasons})
        shown = "\n".join(f"  - {reason}" for reason in reasons)
        print(f'nodus: running unprepared (integration = "auto"):\n{shown}', file=sys.stderr)
        return
    session = Session(trainer, control, settings)
    trainer._nodus_session = session
    trainer.add_callback(_epoch_callback(session))
    trainer.add_callback(_progress_callback(control))
    found = own_saves.of_arguments(trainer.args)
    if found is not None:  # the Trainer saves too: said at its first own save
        trainer.add_callback(own_saves.callback(control, found))


def _assess(trainer: Any, given: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Why the program is outside its profile, and the profile's extensions it uses.

    nodus's managed-method program (its settings in the environment) has a profile of its own,
    with no extensions; every other program is checked against the v1 profile."""
    if protocol.ENV_METHOD in os.environ:
        from nodus.stages.hf.inprocess import method_profile

        return method_profile.check(trainer, given), {}
    found = profile.assess(trainer, given)
    return found.reasons, found.extensions


def _epoch_callback(session: Session) -> Any:
    """Tells the session whether the next boundary is a step end or an epoch end."""
    from transformers import TrainerCallback

    class NodusEpochCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            session.epoch_ending = False

        def on_epoch_end(self, args, state, control, **kwargs):
            session.epoch_ending = True

    NodusEpochCallback.__module__ = __name__
    return NodusEpochCallback()


def _progress_callback(channel: ControlDir) -> Any:
    """Writes ``progress.json`` (step, the step training ends at, the last loss, the speed) at
    most every ``protocol.PROGRESS_EVERY_S``, from the process of rank 0, for ``runs get``."""
    from transformers import TrainerCallback

    class NodusProgressCallback(TrainerCallback):
        def __init__(self) -> None:
            self.first: tuple[float, int] | None = None  # (time, step) of this process's first
            self.loss: float | None = None
            self.written = 0.0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and isinstance(logs.get("loss"), (int, float)):
                self.loss = float(logs["loss"])

        def on_step_end(self, args, state, control, **kwargs):
            now = time.time()
            if self.first is None:
                self.first = (now, state.global_step)
            if now - self.written >= protocol.PROGRESS_EVERY_S:
                self._write(state, now)

        def on_train_end(self, args, state, control, **kwargs):
            self._write(state, time.time(), ended=True)

        def _write(self, state: Any, now: float, ended: bool = False) -> None:
            if not state.is_world_process_zero:
                return
            self.written = now
            progress = _progress_of(state, self.first, self.loss, now, ended)
            # progress is a view for people: training never stops for it
            with contextlib.suppress(OSError):
                channel.write_progress(progress)

    NodusProgressCallback.__module__ = __name__
    return NodusProgressCallback()


def _progress_of(
    state: Any, first: tuple[float, int] | None, loss: float | None, now: float, ended: bool
) -> protocol.Progress:
    """The progress record of the Trainer's ``state`` at ``now``: the speed is measured from
    this process's ``first`` (time, step) seen."""
    since, first_step = first or (now, state.global_step)
    steps = state.global_step - first_step
    speed = steps / (now - since) if steps > 0 and now > since else None
    return protocol.Progress(
        step=state.global_step,
        max_steps=state.max_steps if state.max_steps and state.max_steps > 0 else None,
        loss=loss,
        steps_per_second=speed,
        at=now,
        ended=ended,
    )
