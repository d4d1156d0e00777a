"""Point 6: each profile violation is refused by explicit v1 and run unprepared under auto."""

from __future__ import annotations

import sys

import pytest
from hf_helpers import PROGRAMS, QUICKSTART

from nodus.stages.hf import driver

pytestmark = pytest.mark.hf

# violation -> words its reason must contain
VIOLATIONS = {
    "fp16": "fp16=True",
    "subclass": "Trainer subclass",
    "workers": "dataloader_num_workers=2",
    "iterable": "streaming data",
    "peft": "PEFT",
    "save_only_model": "save_only_model=True",
    "load_best": "load_best_model_at_end=True",
}


def _run(workdir, integration: str, name: str) -> tuple[driver.Attempt, list[dict]]:
    copy = driver.new_copy(QUICKSTART, str(workdir), name)
    run = driver.start(
        copy,
        [sys.executable, str(PROGRAMS / "violations.py")],
        integration,
        save_every=1,
        env={"VIOLATIONS": ",".join(VIOLATIONS), "QUICKSTART_MAX_STEPS": "2"},
    )
    assert run.finish() == 0, run.log()[-3000:]
    return run, run.events()


def test_explicit_v1_refuses_each_violation_naming_its_reason(tmp_path):
    run, events = _run(tmp_path, "hf-trainer-v1", "explicit")
    log = run.log()
    assert [e["type"] for e in events] == ["integration_refused"] * len(VIOLATIONS)
    for (name, words), event in zip(VIOLATIONS.items(), events):
        assert f"VIOLATION {name} refused 1" in log
        assert any(words in reason for reason in event["details"]["reasons"]), (name, event)
    assert "trained" not in log
    assert not run.recorded_steps()


def test_auto_runs_each_violation_unprepared_and_records_why(tmp_path):
    run, events = _run(tmp_path, "auto", "auto")
    log = run.log()
    assert [e["type"] for e in events] == ["integration_unprepared"] * len(VIOLATIONS)
    for (name, words), event in zip(VIOLATIONS.items(), events):
        assert f"VIOLATION {name} trained" in log
        assert any(words in reason for reason in event["details"]["reasons"]), (name, event)
    # unprepared means untouched: save_every=1 produced no integration saves
    assert not run.recorded_steps()
