"""A Trainer under hf-trainer-v1 that also saves checkpoints of its own is told so once: a line
in its output and a `duplicate_saves` event, naming the setting to turn off and what its save
cost (tests/hf/programs/own_saves.py: the quick-start with `save_strategy="steps"`)."""

from __future__ import annotations

import os

import pytest
from runner_e2e_helpers import Project

from nodus.schemas.units import human_bytes
from nodus.stages.hf.inprocess.own_saves import OwnSaves, own_saves, sentence

CASES = [
    # (save_strategy, save_steps) -> what the line names
    (("no", 500), None),
    (("steps", 500), 'save_strategy="steps", save_steps=500'),
    (("steps", 0.25), 'save_strategy="steps", save_steps=0.25'),
    (("epoch", 500), 'save_strategy="epoch"'),
    (("best", 500), 'save_strategy="best"'),
]


@pytest.mark.parametrize(("given", "named"), CASES, ids=[str(c[0]) for c in CASES])
def test_which_arguments_save_by_themselves(given, named):
    found = own_saves(*given)
    assert (found.setting if found else None) == named


def test_the_line_names_the_setting_to_turn_off_and_the_cost():
    found = OwnSaves("steps", 5)
    measured = sentence(found, 3 * 2**20, True, "out/trainer/checkpoint-5")
    assert '(save_strategy="steps", save_steps=5)' in measured
    assert "its save wrote 3.0 MiB to out/trainer/checkpoint-5" in measured
    assert measured.endswith('set save_strategy="no" (--save_strategy no) to stop it')
    guessed = sentence(found, 2**20, False, "out/trainer/checkpoint-5")
    assert "each writes about 1.0 MiB (the model's parameters) or more" in guessed


def _folder_bytes(folder) -> int:
    return sum(
        os.path.getsize(os.path.join(parent, name))
        for parent, _, names in os.walk(folder)
        for name in names
    )


@pytest.mark.slow
def test_a_trainer_saving_its_own_checkpoints_is_told_once_with_the_cost(tmp_path):
    project = Project(
        tmp_path,
        program="own_saves.py",
        write_delay="0",
        env={"OWN_SAVE_STEPS": "5", "QUICKSTART_EPOCHS": "1"},  # 12 steps: own saves at 5, 10
    )
    proc = project.nodus("run", str(project.file), "--key", "own")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    view = project.get("own")
    (event,) = [e for e in view["events"] if e["type"] == "duplicate_saves"]
    assert event["setting"] == 'save_strategy="steps", save_steps=5'
    assert (event["turn_off"], event["flag"]) == ('save_strategy="no"', "--save_strategy no")
    assert (event["step"], event["measured"]) == (5, True)
    # what the Trainer's own save wrote, in the working copy it trained in
    folder = project.copy_of("own", 1) / "out" / "trainer" / "checkpoint-5"
    assert event["bytes"] == _folder_bytes(folder) > 0
    logs = project.nodus("runs", "logs", "own")
    said = [line for line in logs.stdout.splitlines() if "checkpoints of its own" in line]
    assert said == [sentence(OwnSaves("steps", 5), event["bytes"], True, event["folder"])]
    assert f"its save wrote {human_bytes(event['bytes'])}" in said[0]
    assert said[0] in proc.stdout  # in nodus run's stream too, with its [stage] prefix
