"""Decide, when a Trainer is built, whether it runs prepared, unprepared, or not at all.

Explicit ``hf-trainer-v1`` refuses a program outside the profile or an environment that is not
qualified (for the profile, and for each extension of it the program uses), listing every reason
(event ``integration_refused``, non-zero exit). ``auto`` runs such a program unprepared and
records why (event ``integration_unprepared``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from nodus import protocol
from nodus.stages.hf.inprocess import profile
from nodus.stages.hf.inprocess.channel import ControlDir
from nodus.stages.hf.inprocess.session import Session, refuse
from nodus.stages.hf.qualification import (
    current_versions,
    is_qualified,
    unqualified_extension_reasons,
    unqualified_reason,
)


def prepare(trainer: Any, given: dict[str, Any]) -> None:
    control = ControlDir.from_environment()
    settings = control.settings()
    reasons, used = _assess(trainer, given)
    versions = current_versions()
    home = settings.home or None
    if not settings.qualifying:
        if not is_qualified(versions, home):
            reasons.append(unqualified_reason(versions))
        device = trainer.args.device.type
        reasons += unqualified_extension_reasons(versions, home, used, device)
    if reasons and settings.explicit:
        refuse(control, reasons)
    if reasons:
        control.write_event(protocol.EVENT_UNPREPARED, {"reasons": reasons})
        shown = "\n".join(f"  - {reason}" for reason in reasons)
        print(f'nodus: running unprepared (integration = "auto"):\n{shown}', file=sys.stderr)
        return
    session = Session(trainer, control, settings)
    trainer._nodus_session = session
    trainer.add_callback(_epoch_callback(session))


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
