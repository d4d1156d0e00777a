"""A run's protection, stated from what happened (:mod:`nodus.inventory.protection`): a table
of stages and events, in milliseconds."""

from __future__ import annotations

import pytest

from nodus.inventory.protection import protection, protection_line

CHECKPOINTED = {
    "name": "main",
    "continuity": {"mode": "checkpointed", "checkpoint_paths": ["state"]},
}
RESTARTABLE = {"name": "main", "continuity": {"mode": "restartable", "checkpoint_paths": []}}
STARTED = [{"name": "main", "attempts": [{"number": 1}]}]


def event(type_: str, **details) -> dict:
    return {"type": type_, "stage": "main", "attempt": 1, **details}


COMMITTED = event("snapshot_committed", snapshot="ckpt_1", step=40, reason="settled")
UNPREPARED = event("integration_unprepared", reasons=["load_best_model_at_end=True"])
INCOMPLETE = event("checkpoint_incomplete", step=10, why="no trainer_state.json")
NEWER = event("capture_skipped", step=5, reason="newer checkpoints kept coming")
UNSETTLED = event("capture_unsettled", changes=9, settle_s=1.0)
FAILED = event("capture_failed", step=5, reason="settled", error="No space left on device")
IGNORED = event("restore_ignored", restored_step=100, step=20, snapshot="ckpt_2")

# events -> state, words the reason holds
TABLE = [
    ([COMMITTED], "protected", None),
    ([UNPREPARED, COMMITTED], "protected", None),  # it saved by itself all the same
    ([], "unprotected", "nothing was saved into its selection (state)"),
    ([UNPREPARED], "unprotected", "ran the program unprepared (load_best_model_at_end=True)"),
    ([INCOMPLETE, INCOMPLETE], "unprotected", "2 checkpoints were incomplete, the first: no"),
    ([NEWER], "unprotected", "closer together than the settle time, so none settled"),
    ([UNSETTLED], "unprotected", "than the settle time (1 s)"),
    ([FAILED], "unprotected", "its captures failed (No space left on device)"),
    ([COMMITTED, IGNORED], "not resuming", "restored step 100 but its program saved step 20"),
]


@pytest.mark.parametrize(("events", "state", "why"), TABLE)
def test_protection_is_stated_from_what_happened(events, state, why):
    found = protection([CHECKPOINTED], STARTED, events)
    assert found["state"] == state
    assert (found["why"] is None) if why is None else (why in found["why"])


def test_nothing_is_said_before_an_attempt_and_a_restartable_stage_is_not_unprotected():
    assert protection([CHECKPOINTED], [{"name": "main", "attempts": []}], []) is None
    restartable = protection([RESTARTABLE], STARTED, [])
    assert restartable["state"] == "restartable"
    assert protection_line(restartable, stopped=True) is None


def test_the_weakest_stage_is_the_one_named():
    stages = [{**CHECKPOINTED, "name": "pre"}, CHECKPOINTED]
    rows = [{"name": "pre", "attempts": [{"number": 1}]}, *STARTED]
    found = protection(stages, rows, [{**COMMITTED, "stage": "pre"}])
    assert (found["stage"], found["state"]) == ("main", "unprotected")
    assert protection(stages, rows, [{**COMMITTED, "stage": "pre"}, COMMITTED])["stage"] == "main"


def test_the_line_says_ended_once_stopped_and_has_while_training():
    found = protection([CHECKPOINTED], STARTED, [])
    assert protection_line(found, stopped=False) == (
        "unprotected: stage 'main' has no snapshot to continue from: nothing was saved into "
        "its selection (state)"
    )
    assert "stage 'main' ended without a snapshot" in protection_line(found, stopped=True)
    ignored = protection([CHECKPOINTED], STARTED, [COMMITTED, IGNORED])
    line = protection_line(ignored, stopped=True)
    assert line.startswith("not resuming: stage 'main': attempt 1 restored step 100")
    assert "$NODUS_RESTORED_CHECKPOINT" in line
