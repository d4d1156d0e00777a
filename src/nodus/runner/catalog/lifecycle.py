"""A run's lifecycle: every change of a run's phase, checked against one table.

:class:`RunLifecycle` is the only writer of a run's phase once the run exists (acceptance
records it ``QUEUED``; an adoption copies the phase its store's record holds, which the
lifecycle of the runner that wrote it checked). Each move is checked against
:data:`TRANSITIONS` before it is written; one the table does not hold raises
:class:`~nodus.errors.PhaseTransitionError`. Such a move is a bug in nodus, never a user's
mistake, so it stops whatever asked for it instead of recording a phase nothing expects.

Who moves a run where (the table's rows, read by the phase moved to):

    QUEUED       a claim for a background runner (``--detach``) of a run continued by
                 ``runs resume`` or ``run --key``: paused, interrupted, or left unstopped by
                 a runner that is gone
    PREPARING    an attempt lays out its copy: the first, the next stage's, a resumed run's
                 (PAUSED, INTERRUPTED, or a dead runner's phase when nothing was left running),
                 and a Ray node's copy of the record, which the runner had moved there already
    RUNNING      the attempt's program started (after PREPARING or RECOVERING), or a pause
                 was given up while it ran (PAUSING)
    RECOVERING   a recovery before the next attempt: after one that ended lost, or failed
                 after restoring a suspect snapshot (preparing, running, pausing, recovering),
                 or at the start of a drive that found a dead runner's attempt (its phase as
                 it left it, or QUEUED when detached)
    PAUSING      ``runs pause`` taken up while the program runs
    PAUSED       the pause completed (from PAUSING; a Ray attempt's pause is carried out on its
                 node, so the runner's run goes there from RUNNING)
    SUCCEEDED    the last stage succeeded (RUNNING; PAUSING when the program ended before the
                 pause; QUEUED when every stage had succeeded before a detached continuation)
    INTERRUPTED  a notice to the runner (SIGTERM, SIGINT), or an attempt lost while
                 ``resume_on_interruption`` is false: from any phase a runner drives in
                 (QUEUED: a detached continuation that found a dead runner's attempt)
    FAILED       from any phase not stopped for good (a drive that cannot start counts too)
    CANCELLED    ``runs cancel``: from any phase not stopped for good

``PENDING`` is a stage's phase only: a run never enters or leaves it.
"""

from __future__ import annotations

from typing import Protocol

from nodus.errors import PhaseTransitionError
from nodus.runner.catalog.phases import Phase

__all__ = ["TRANSITIONS", "RunLifecycle", "allowed", "check"]

# The phases a runner drives a run in, or a dead runner left it in.
_DRIVEN = frozenset({Phase.QUEUED, Phase.PREPARING, Phase.RUNNING, Phase.RECOVERING, Phase.PAUSING})
# The phases not stopped for good: a drive, a resume or a cancel may still end them.
_OPEN = _DRIVEN | {Phase.PAUSED, Phase.INTERRUPTED}

# fmt: off
_INTO: dict[Phase, frozenset[Phase]] = {  # phase moved to ← the phases it may be reached from
    Phase.QUEUED:      _OPEN - {Phase.QUEUED},
    Phase.PREPARING:   _OPEN,
    Phase.RUNNING:     frozenset({Phase.PREPARING, Phase.RECOVERING, Phase.PAUSING}),
    Phase.RECOVERING:  _DRIVEN,
    Phase.PAUSING:     frozenset({Phase.RUNNING}),
    Phase.PAUSED:      frozenset({Phase.PAUSING, Phase.RUNNING}),
    Phase.SUCCEEDED:   frozenset({Phase.QUEUED, Phase.RUNNING, Phase.PAUSING}),
    Phase.INTERRUPTED: _DRIVEN,
    Phase.FAILED:      _OPEN,
    Phase.CANCELLED:   _OPEN,
}
# fmt: on

TRANSITIONS: frozenset[tuple[Phase, Phase]] = frozenset(
    (source, target) for target, sources in _INTO.items() for source in sources
)
"""Every allowed ``(from, to)`` change of a run's phase; nothing else is ever written."""


def allowed(source: Phase, target: Phase) -> bool:
    """A run in ``source`` may be moved to ``target``."""
    return (Phase(source), Phase(target)) in TRANSITIONS


def check(run_id: str, source: Phase, target: Phase) -> None:
    """Refuse a change the table does not hold (a nodus bug: it fails loudly)."""
    if not allowed(source, target):
        raise PhaseTransitionError(
            f"run {run_id}: no change of phase leads from {source} to {target} (a bug in "
            "nodus: nothing was recorded)"
        )


class _PhaseWriter(Protocol):
    """The catalog's side: the run's phase as stored, and the raw write."""

    def _phase_of(self, run_id: str) -> Phase: ...

    def _write_phase(
        self,
        run_id: str,
        phase: Phase,
        *,
        message: str | None,
        stage: str | None,
        stage_phase: Phase | None,
    ) -> None: ...


class RunLifecycle:
    """Every change of a run's phase (the catalog's ``lifecycle``), checked, then written
    with its ``phase`` event, its exit status and ``finished_at`` where the run stops.

    A change is checked against the phase the catalog holds when it is made; every writer
    holds the run's lock (its runner, a claim, a cancel without a runner), so nothing moves
    the run between the read and the write.
    """

    def __init__(self, catalog: _PhaseWriter) -> None:
        self._catalog = catalog

    def move(
        self,
        run_id: str,
        phase: Phase,
        *,
        message: str | None = None,
        stage: str | None = None,
        stage_phase: Phase | None = None,
    ) -> None:
        """Move the run (and ``stage``, to ``stage_phase`` or the same phase) to ``phase``."""
        phase = Phase(phase)
        check(run_id, self._catalog._phase_of(run_id), phase)
        self._catalog._write_phase(
            run_id, phase, message=message, stage=stage, stage_phase=stage_phase
        )
