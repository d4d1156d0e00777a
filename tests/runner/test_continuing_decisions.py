"""What continuing a run means, as a table: one decision for `run --key`, `runs resume` and an
adoption from the store (:mod:`nodus.runner.recovery.continuing`), in milliseconds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.recovery.continuing import (
    Asker,
    RunFacts,
    Start,
    Verb,
    continuation,
    start_line,
    start_point,
)

KEY, RESUME = Asker.KEY, Asker.RESUME
CONTINUE, LEAVE, NEW_RUN = Verb.CONTINUE, Verb.LEAVE, Verb.NEW_RUN
PREEMPTED, LOST = AttemptOutcome.PREEMPTED, AttemptOutcome.LOST

# phase, how its newest attempt ended, whether a program ever started, run --key, runs resume
TABLE = [
    # its runner is gone (died, killed, the machine lost) in a phase that goes on
    (Phase.QUEUED, None, False, CONTINUE, CONTINUE),
    (Phase.PREPARING, None, True, CONTINUE, CONTINUE),
    (Phase.RUNNING, AttemptOutcome.SUCCEEDED, True, CONTINUE, CONTINUE),
    (Phase.RUNNING, None, False, CONTINUE, CONTINUE),  # died before its first program started
    (Phase.RECOVERING, LOST, True, CONTINUE, CONTINUE),
    (Phase.PAUSING, None, True, CONTINUE, CONTINUE),
    # interrupted from outside: a reboot's SIGTERM, `systemctl stop`, Ctrl-C
    (Phase.INTERRUPTED, PREEMPTED, True, CONTINUE, CONTINUE),
    (Phase.INTERRUPTED, None, True, CONTINUE, CONTINUE),
    # resume_on_interruption = false: continued by hand only
    (Phase.INTERRUPTED, LOST, True, LEAVE, CONTINUE),
    # paused by hand: stays paused until `runs resume`
    (Phase.PAUSED, AttemptOutcome.PAUSED, True, LEAVE, CONTINUE),
    # final
    (Phase.SUCCEEDED, AttemptOutcome.SUCCEEDED, True, LEAVE, LEAVE),
    (Phase.FAILED, AttemptOutcome.FAILED, True, LEAVE, LEAVE),
    (Phase.CANCELLED, AttemptOutcome.CANCELLED, True, LEAVE, LEAVE),
    (Phase.CANCELLED, None, False, LEAVE, LEAVE),
    # failed before any program started: the key goes to a corrected workload
    (Phase.FAILED, AttemptOutcome.FAILED, False, NEW_RUN, LEAVE),
    (Phase.FAILED, None, False, NEW_RUN, LEAVE),
]


@pytest.mark.parametrize(("phase", "stopped_by", "started", "by_key", "by_resume"), TABLE)
def test_every_command_gives_a_run_in_the_same_state_the_same_answer(
    phase, stopped_by, started, by_key, by_resume
):
    run = RunFacts("run_1", phase, "nightly", stopped_by, started, "why it stopped")
    assert continuation(run, KEY).verb is by_key
    assert continuation(run, RESUME).verb is by_resume


def test_no_command_ends_a_run_another_command_would_continue():
    """Over every state: the two commands differ only where the user asked for the run to be
    left as it is (paused; resume_on_interruption = false), and only `run --key` gives a key
    away, to a run that never started its program."""
    differ = set()
    for phase in Phase:
        for stopped_by in (None, *AttemptOutcome):
            for started in (True, False):
                run = RunFacts("run_1", phase, "k", stopped_by, started)
                by_key, by_resume = continuation(run, KEY).verb, continuation(run, RESUME).verb
                assert by_resume is not NEW_RUN
                if by_key is NEW_RUN:
                    assert phase == Phase.FAILED and not started
                elif by_key is not by_resume:
                    differ.add((phase, stopped_by))
                if not phase.stopped:
                    assert by_key is by_resume is CONTINUE
    assert differ == {(Phase.PAUSED, outcome) for outcome in (None, *AttemptOutcome)} | {
        (Phase.INTERRUPTED, LOST)
    }


def test_the_lines_say_what_happens_and_what_continues_a_run_left_as_it_is():
    def line(phase, asker, stopped_by=None, started=True):
        facts = RunFacts("run_1", phase, "nightly", stopped_by, started, "not found on PATH")
        return continuation(facts, asker).line

    assert "continuing it" in line(Phase.INTERRUPTED, KEY, PREEMPTED)
    assert "a reboot" in line(Phase.INTERRUPTED, KEY, PREEMPTED)
    assert "recovering it" in line(Phase.RUNNING, KEY)
    paused = line(Phase.PAUSED, KEY, AttemptOutcome.PAUSED)
    assert "stays paused" in paused and "`nodus runs resume run_1` continues it" in paused
    kept = line(Phase.INTERRUPTED, KEY, LOST)
    assert "resume_on_interruption = false" in kept and "nodus runs resume run_1" in kept
    finished = line(Phase.SUCCEEDED, KEY)
    assert "has already finished: SUCCEEDED (exit status 0); not running it again" in finished
    assert "has finished (CANCELLED)" in line(Phase.CANCELLED, RESUME)
    new = line(Phase.FAILED, KEY, AttemptOutcome.FAILED, started=False)
    assert "before its program ever started (not found on PATH)" in new
    assert "the key is given to a new run" in new


def test_a_key_is_given_away_only_to_a_changed_workload():
    """The same file, code and PATH would fail alike: a new run every cron call would only
    pile up failures, so the key stays with the failed run and the line says how to free it."""
    never = RunFacts("run_1", Phase.FAILED, "k", AttemptOutcome.FAILED, False, "not executable")
    same = continuation(replace(never, inputs_changed=False), KEY)
    assert same.verb is LEAVE
    assert "are as they were" in same.line and "`nodus runs delete run_1` frees it now" in same.line
    assert continuation(never, KEY).verb is NEW_RUN
    assert continuation(replace(never, inputs_changed=False), RESUME).verb is LEAVE


# checkpointed, committed, restorable, continues a parent -> where it starts
STARTS = [
    (False, 0, 0, False, Start.RESTART),
    (False, 3, 3, False, Start.RESTART),
    (True, 3, 1, False, Start.SNAPSHOT),
    (True, 3, 1, True, Start.SNAPSHOT),
    (True, 0, 0, False, Start.BEGINNING),  # trained, never saved: nothing kept is lost
    (True, 0, 0, True, Start.PARENT),
    (True, 2, 0, False, Start.LOST),  # retention kept only weights: never silently step 0
    (True, 2, 0, True, Start.LOST),
]


@pytest.mark.parametrize(("checkpointed", "committed", "restorable", "parent", "start"), STARTS)
def test_where_a_continued_stage_starts(checkpointed, committed, restorable, parent, start):
    assert (
        start_point(
            checkpointed=checkpointed,
            committed=committed,
            restorable=restorable,
            continues_parent=parent,
        )
        is start
    )


def test_each_start_is_said_in_words():
    assert start_line(Start.SNAPSHOT, "main", "step 40") == (
        "stage 'main' continues from its newest snapshot (step 40)"
    )
    assert start_line(Start.SNAPSHOT, "main", "capture 3").endswith("(capture 3)")
    assert "from the beginning: it committed no snapshot" in start_line(Start.BEGINNING, "main")
    assert "fails rather than start again" in start_line(Start.LOST, "main")
    assert "restartable" in start_line(Start.RESTART, "main")
    assert "the run it continues" in start_line(Start.PARENT, "main")
