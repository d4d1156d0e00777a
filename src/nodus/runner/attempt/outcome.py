"""How an attempt ended, as the engine and every backend read it, and how it is told.

:func:`classify` is the pure classification of a program's end: the attempt gathers the facts
(:class:`Exit`: its status, the signals nodus sent, what its supervisor saw) and carries out
what follows (outputs captured, a ``process_killed`` event). How an attempt ends:

    succeeded    exit 0
    failed       non-zero exit (``program_failed`` unless the integration refused the attempt),
                 or killed by a signal nodus sent
    lost         killed by a signal nodus did not send; or a process of its tree was, and the
                 program (a launcher: ``sh -c``, ``torchrun``) then exited non-zero; or its
                 supervisor was lost
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from nodus.runner.catalog.phases import AttemptOutcome
from nodus.runner.processes.messages import Loss
from nodus.runner.processes.stage_process import signal_name

__all__ = ["Exit", "Outcome", "classify"]


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended (``kind``) and why, in words (``detail``)."""

    kind: AttemptOutcome
    detail: str
    # failed: the program's own non-zero exit, which a bad restored snapshot can cause
    # (the runner then may step back to an older one: nodus.runner.recovery.suspects)
    program_failed: bool = False


@dataclass(frozen=True)
class Exit:
    """What :func:`classify` reads of a program that ended."""

    status: int  # as subprocess reports it: negative when killed by that signal
    program: str  # the command's first word, as the detail names it
    supervisor_lost: str | None = None  # how the attempt's supervisor died, if it did
    sent: Collection[int] = ()  # the signals nodus sent the program
    oom: bool = False  # the program itself died in an OOM kill
    loss: Loss | None = None  # status > 0: the process of its tree a foreign signal killed
    refusal: str = ""  # status > 0: why the integration refused the attempt (": …"), or ''


def classify(ended: Exit) -> Outcome:
    """How an attempt whose program ended so ended."""
    if ended.supervisor_lost is not None:
        return Outcome(
            AttemptOutcome.LOST,
            f"the attempt's supervisor was lost ({ended.supervisor_lost})",
        )
    if ended.status == 0:
        return Outcome(AttemptOutcome.SUCCEEDED, "exit status 0")
    if ended.status > 0:
        return _classify_exit(ended)
    name = signal_name(-ended.status)
    if -ended.status in ended.sent:
        return Outcome(AttemptOutcome.FAILED, f"stopped by {name} from nodus")
    oom = " (an OOM kill)" if ended.oom else ""
    return Outcome(AttemptOutcome.LOST, f"killed by {name}{oom}, which nodus did not send")


def _classify_exit(ended: Exit) -> Outcome:
    """A non-zero exit fails the stage, unless its tree lost a process to a foreign signal."""
    loss = ended.loss
    if loss is None:
        detail = f"{ended.program} exited with status {ended.status}{ended.refusal}"
        return Outcome(AttemptOutcome.FAILED, detail, program_failed=not ended.refusal)
    name = signal_name(loss.signal)
    how = f"{name} (an OOM kill)" if loss.oom else name
    return Outcome(
        AttemptOutcome.LOST,
        f"process {loss.pid} ({loss.command}) was killed by {how}, which nodus did not "
        f"send; {ended.program} then exited with status {ended.status}",
    )
