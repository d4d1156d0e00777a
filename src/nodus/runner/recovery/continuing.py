"""What "continue this run" means: one decision for ``nodus run --key``, ``nodus runs resume``
and a run adopted from its store, as pure functions over plain facts.

Whichever command asks, a run in the same state gets the same answer; only what a command
does with "not continued" differs (``run --key`` reports the run and exits with its status,
``runs resume`` refuses, exit 2)::

    the run stands                                   run --key           runs resume
    QUEUED … PAUSING, its runner gone (died, killed,  continue            continue
      the machine lost)
    INTERRUPTED by a notice to its runner (SIGTERM    continue            continue
      or SIGINT: a reboot, `systemctl stop`, Ctrl-C)
    INTERRUPTED, resume_on_interruption = false       left as it is (3)   continue
    PAUSED (`nodus runs pause`)                       left paused (3)     continue
    FAILED before any attempt started its program     a new run takes     refused
      (nothing trained: a command not executable, …)    the key once the
                                                        workload changed
    SUCCEEDED, FAILED, CANCELLED                      reported            refused

Where a continued stage starts (:func:`start_point`) is the same for every command and for the
automatic recoveries: its newest restorable snapshot; the parent's snapshot while a stage that
continues another run has none of its own; the beginning when it never committed a snapshot
(nothing kept is thrown away: the progress since the last save is what any interruption costs);
and never the beginning when it committed snapshots but none holds training state any more
(retention kept only weights): that stage fails, naming why, whoever asked.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodus.runner.catalog.phases import AttemptOutcome, Phase

__all__ = [
    "Asker",
    "Continuation",
    "RunFacts",
    "Start",
    "Verb",
    "continuation",
    "start_line",
    "start_point",
]


class Asker(enum.Enum):
    """Which command asks to continue the run (an adoption asks as the command that found it)."""

    KEY = "nodus run --key"
    RESUME = "nodus runs resume"


class Verb(enum.Enum):
    """What the asking command does with the run."""

    CONTINUE = "continue"  # drive it again, from :func:`start_point`
    LEAVE = "leave"  # not continued: reported (run --key, its exit status) or refused (resume)
    NEW_RUN = "new run"  # run --key only: the key is given to a new run of the file


@dataclass(frozen=True)
class RunFacts:
    """What the decision reads of a run whose lock the asker holds (so no runner drives it)."""

    id: str
    phase: Phase
    key: str | None = None
    stopped_by: AttemptOutcome | None = None  # how the newest ended attempt ended
    program_started: bool = True  # some attempt started the stage's program
    message: str | None = None  # the run's message (why it stopped)
    # What this call would accept (the workload file's resolution, the executables its PATH
    # finds, the code folder) differs from what the run accepted; read only for a run that
    # never started its program.
    inputs_changed: bool = True


@dataclass(frozen=True)
class Continuation:
    """The answer: what to do, and the one line that says it."""

    verb: Verb
    line: str


def continuation(run: RunFacts, asker: Asker) -> Continuation:
    """What ``asker`` does with ``run`` (see the table above)."""
    phase = run.phase
    if not phase.stopped:
        return Continuation(
            Verb.CONTINUE, f"{_named(run)} was left {phase} by a runner that is gone; recovering it"
        )
    if phase == Phase.INTERRUPTED:
        return _interrupted(run, asker)
    if phase == Phase.PAUSED:
        if asker is Asker.RESUME:
            return Continuation(Verb.CONTINUE, f"resuming {run.id}, paused by `nodus runs pause`")
        return _left(run, "is PAUSED by `nodus runs pause` and stays paused")
    # SUCCEEDED, FAILED, CANCELLED: stopped for good
    if phase == Phase.FAILED and not run.program_started and asker is Asker.KEY:
        failed = f"{_named(run)} FAILED before its program ever started ({run.message or '-'})"
        if not run.inputs_changed:
            return Continuation(
                Verb.LEAVE,
                f"{failed}; the workload file, its code folder and the PATH are as they were, "
                "so a new run would fail alike: once they are corrected the next `nodus run "
                f"--key` gives the key to a new run (`nodus runs delete {run.id}` frees it now)",
            )
        return Continuation(
            Verb.NEW_RUN,
            f"{failed}; it trained nothing, and the workload has changed since, so the key is "
            f"given to a new run of the workload file as it is now ({run.id} stays listed, "
            "without the key)",
        )
    if asker is Asker.KEY:
        return Continuation(
            Verb.LEAVE,
            f"{_named(run)} has already finished: {phase} (exit status {phase.exit_status}); "
            "not running it again",
        )
    return Continuation(
        Verb.LEAVE,
        f"{run.id} has finished ({phase}); only an interrupted, paused or runner-less run can be "
        "resumed",
    )


def _interrupted(run: RunFacts, asker: Asker) -> Continuation:
    if asker is Asker.RESUME:
        return Continuation(Verb.CONTINUE, f"resuming {run.id}, INTERRUPTED")
    if run.stopped_by == AttemptOutcome.LOST:
        # The program was interrupted and continuity said not to recover by itself.
        return _left(run, "is INTERRUPTED and resume_on_interruption = false keeps it so")
    return Continuation(
        Verb.CONTINUE,
        f"{_named(run)} was INTERRUPTED from outside (a notice to its runner: a reboot, "
        "`systemctl stop`, Ctrl-C); continuing it",
    )


def _left(run: RunFacts, why: str) -> Continuation:
    return Continuation(
        Verb.LEAVE, f"{_named(run)} {why}; `nodus runs resume {run.id}` continues it"
    )


def _named(run: RunFacts) -> str:
    return f"{run.id} under key {run.key!r}" if run.key else run.id


class Start(enum.Enum):
    """Where a continued (or recovered) checkpointed stage's next attempt starts."""

    RESTART = "restart"  # a restartable stage: its source alone, by design
    SNAPSHOT = "snapshot"  # its newest restorable snapshot
    PARENT = "parent"  # the snapshot of the run it continues (nothing of its own yet)
    BEGINNING = "beginning"  # the source: nothing was committed, nothing is lost
    LOST = "lost"  # snapshots were committed but none holds training state: the stage fails


def start_point(
    *, checkpointed: bool, committed: int, restorable: int, continues_parent: bool
) -> Start:
    """Where a stage continues from, given its committed snapshots that hold files
    (``committed``), those of them that hold training state (``restorable``), and whether it
    continues another run's snapshot."""
    if not checkpointed:
        return Start.RESTART
    if restorable:
        return Start.SNAPSHOT
    if continues_parent and not committed:
        return Start.PARENT
    return Start.LOST if committed else Start.BEGINNING


def start_line(start: Start, stage: str, at: str | None = None) -> str:
    """The words for ``start``, said when a run is continued; ``at``: the newest snapshot's
    step as said (``step 40``, or ``capture 3`` where the program records no step)."""
    if start is Start.RESTART:
        return f"stage {stage!r} starts again from its source (continuity mode restartable)"
    if start is Start.SNAPSHOT:
        return f"stage {stage!r} continues from its newest snapshot ({at})"
    if start is Start.PARENT:
        return f"stage {stage!r} starts from the snapshot of the run it continues"
    if start is Start.BEGINNING:
        return (
            f"stage {stage!r} starts again from the beginning: it committed no snapshot to "
            "continue from"
        )
    return (
        f"stage {stage!r} committed snapshots but none holds its training state any more; it "
        "fails rather than start again from the beginning"
    )
