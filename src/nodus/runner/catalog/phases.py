"""Phases of a run, how an attempt ends, and the exit status each one means: one table each.

A run moves ``QUEUED → PREPARING → RUNNING ⇄ RECOVERING`` and ``RUNNING → PAUSING → PAUSED``;
it stops in ``SUCCEEDED``, ``FAILED``, ``CANCELLED`` or ``INTERRUPTED`` (the terminal phases)
or in ``PAUSED``. ``INTERRUPTED`` and ``PAUSED`` can be resumed by hand (``nodus runs
resume``). Every phase where the run stops carries the exit status of ``nodus run``,
``runs resume`` and ``runs wait --exit-status``; the catalog stores it with the phase.

Both enums are ``str`` valued, so the catalog, the ``--json`` output and events keep the plain
names (``"RUNNING"``, ``"lost"``) and compare equal to them.

No name means two things: a run is ``INTERRUPTED`` when it was stopped from outside and waits to
be resumed; an attempt whose program was killed by something else (or hung, or lost its node or
its runner) ended ``lost``, and continuity decides whether the run recovers. Which phase changes
follow which: :mod:`nodus.runner.catalog.lifecycle`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["AttemptOutcome", "Phase"]


class Phase(StrEnum):
    """A run's phase (a stage's too, which starts ``PENDING``)."""

    # The defaults only let a type checker read ``Phase("RUNNING")`` as the lookup it is.
    def __new__(
        cls,
        value: str,
        exit_status: int | None = None,
        terminal: bool = False,
        resumable: bool = False,
    ) -> Phase:
        member = str.__new__(cls, value)
        member._value_ = value
        member.exit_status = exit_status
        member.terminal = terminal
        member.resumable = resumable
        return member

    exit_status: int | None
    """What the commands exit with once the run stopped here; None while it goes on."""
    terminal: bool
    """The run never leaves this phase by itself."""
    resumable: bool
    """``nodus runs resume`` continues a run stopped here (and ``runs cancel`` still ends it)."""

    # fmt: off
    #             value          exit  terminal resumable
    PENDING     = "PENDING",     None, False,   False  # stages only: not started yet
    QUEUED      = "QUEUED",      None, False,   False
    PREPARING   = "PREPARING",   None, False,   False
    RUNNING     = "RUNNING",     None, False,   False
    RECOVERING  = "RECOVERING",  None, False,   False
    PAUSING     = "PAUSING",     None, False,   False
    PAUSED      = "PAUSED",      3,    False,   True
    SUCCEEDED   = "SUCCEEDED",   0,    True,    False
    FAILED      = "FAILED",      1,    True,    False
    CANCELLED   = "CANCELLED",   4,    True,    False
    INTERRUPTED = "INTERRUPTED", 3,    True,    True
    # fmt: on

    @property
    def stopped(self) -> bool:
        """The run's drive ended here (a terminal phase or PAUSED): it has an exit status."""
        return self.exit_status is not None

    @property
    def final(self) -> bool:
        """Stopped for good: never retried, resumed or cancelled again."""
        return self.terminal and not self.resumable


class AttemptOutcome(StrEnum):
    """How one attempt ended, and the phase the run stops in because of it."""

    def __new__(cls, value: str, stops_run: Phase | None = None) -> AttemptOutcome:  # see Phase
        member = str.__new__(cls, value)
        member._value_ = value
        member.stops_run = stops_run
        return member

    stops_run: Phase | None
    """The phase the run stops in; None when the run goes on (next stage, or a recovery)."""

    SUCCEEDED = "succeeded", None  # exit 0, outputs captured: the next stage runs
    FAILED = "failed", Phase.FAILED  # non-zero exit, or the command could not start
    # killed by a signal nodus did not send, hung, its node or runner lost: continuity decides
    LOST = "lost", None
    PREEMPTED = "preempted", Phase.INTERRUPTED  # the runner got SIGTERM/SIGINT and stopped it
    PAUSED = "paused", Phase.PAUSED  # `nodus runs pause`
    CANCELLED = "cancelled", Phase.CANCELLED  # `nodus runs cancel`, which wins over a pause

    @classmethod
    def _missing_(cls, value: object) -> AttemptOutcome | None:
        """``"interrupted"``, the stored name of ``lost`` before the rename, read as ``lost``:
        store records written by an older nodus still say it (the catalog's own rows were
        rewritten by its migration 6)."""
        return cls.LOST if value == _LOST_BEFORE else None


_LOST_BEFORE = "interrupted"
"""The stored name of :attr:`AttemptOutcome.LOST` before the rename (catalog migration 6)."""
