"""How an attempt ended, as the engine and every backend read it."""

from __future__ import annotations

from dataclasses import dataclass

from nodus.runner.catalog.phases import AttemptOutcome

__all__ = ["Outcome"]


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended (``kind``) and why, in words (``detail``)."""

    kind: AttemptOutcome
    detail: str
    # failed: the program's own non-zero exit, which a bad restored snapshot can cause
    # (the runner then may step back to an older one: nodus.runner.recovery.suspects)
    program_failed: bool = False
