"""Points 2 and 8 under the real runner: save requests, commits and pruning.

SIGKILLs at random steps and in the middle of a save, and the ``stop`` request a preemption
notice or a pause sends (the program answers, blocks, trains no further, and the resume loses no
step), are covered end to end in test_under_runner.py and tests/runner/test_runner_pause.py.
"""

from __future__ import annotations

import os

import pytest
from hf_helpers import SAVE_EVERY
from runner_e2e_helpers import Project

from nodus import protocol
from nodus._atomic import read_json, write_json_atomic
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

# The runner numbers its own requests from 1; this one can never be mistaken for one of them.
REQUEST_ID = 1000


def test_a_continue_request_is_answered_and_older_checkpoints_go_once_newer_are_committed(
    tmp_path, bare_hash
):
    # slow saves keep training slow enough to talk to it; they never change the result
    project = Project(tmp_path, save_every=SAVE_EVERY, write_delay="0.3")
    runner = project.start("run", str(project.file), "--key", "q")
    wait_for(lambda: project.running("q", 1), "attempt 1", runner)
    wait_for(lambda: 10 in project.committed_steps("q", 1), "step 10 committed", runner)
    control = project.control("q", 1)
    # No runner feature asks for a save that continues yet: ask the way the runner would.
    request = protocol.SaveRequest(id=REQUEST_ID, then=protocol.THEN_CONTINUE)
    write_json_atomic(control.request(request.id), request.to_dict())

    answered = wait_for(lambda: _answered_at(control, REQUEST_ID), "the answer", runner)
    wait_for(lambda: answered in project.committed_steps("q", 1), "its commit", runner)
    state = os.listdir(project.copy_of("q", 1) / protocol.STATE_DIR)
    assert protocol.checkpoint_folder(5) not in state  # older than a committed snapshot

    assert runner.wait(timeout=300) == 0
    assert [a["outcome"] for a in project.attempts("q")] == ["succeeded"]
    assert project.outputs_hash("q") == bare_hash  # the extra save changed nothing


def _answered_at(control: protocol.ControlPaths, request_id: int) -> int | None:
    """The step whose save record answers ``request_id``, once one does."""
    for _step, path in protocol.numbered_records(control.saves):
        try:
            record = protocol.SaveRecord.from_dict(read_json(path))
        except (OSError, ValueError):
            continue  # being replaced right now
        if request_id in record.requests:
            return record.step
    return None
