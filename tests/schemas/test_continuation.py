"""What a run that starts from another run's snapshot must keep, and the ``--set`` changes."""

from __future__ import annotations

import pytest

from nodus.errors import WorkloadError
from nodus.schemas.continuation import (
    apply_changes,
    continuation_problems,
    epoch_save_problems,
    parse_setting,
    settings_table,
    without_epoch_saves,
)
from nodus.schemas.loader import resolve_file

BASE = 'name = "w"\ncommand = ["python", "train.py"]\n'


@pytest.fixture
def resolved(tmp_path):
    def build(text: str) -> dict:
        path = tmp_path / "w.toml"
        path.write_text(text)
        return resolve_file(path).to_dict()

    return build


def test_what_may_change_is_no_problem(resolved):
    parent = resolved(BASE + 'outputs = ["out"]\n[execution]\nkeep_recoverable = 1\n')
    child = resolved(
        'name = "other"\ncommand = ["python", "train.py"]\nenv = { MAX_STEPS = "80" }\n'
        "[execution]\nkeep_recoverable = 4\nretention_days = 0\n"
    )
    assert continuation_problems(parent, child, "full-state") == []
    assert continuation_problems(parent, child, "weights") == []


def test_each_difference_names_the_field_and_both_values(resolved):
    parent = resolved(BASE)
    child = resolved('name = "w"\ncommand = ["python", "other.py"]\nintegration = "auto"\n')
    problems = continuation_problems(parent, child, "full-state")
    assert [p.path for p in problems] == ["stages[0].command", "stages[0].integration"]
    assert "must equal the source run's ['python', 'train.py']" in problems[0].render()
    assert "(this run has ['python', 'other.py'])" in problems[0].render()
    # a warm start may run another program on the weights, never another integration
    assert [p.path for p in continuation_problems(parent, child, "weights")] == [
        "stages[0].integration"
    ]


def test_stage_names_must_match(resolved):
    parent = resolved(BASE)
    child = resolved(BASE + '[[stages]]\nname = "train"\n')
    (problem,) = continuation_problems(parent, child, "full-state")
    assert problem.path == "stages[*].name" and "['main']" in problem.render()


def test_set_changes_apply_as_command_line_overrides(resolved):
    parent = resolved(BASE + 'env = { A = "1", B = "2" }\n[execution]\nmax_recoveries = 2\n')
    changes = settings_table(
        parse_setting(text)
        for text in ("env.B=3", "execution.keep_recoverable=4", 'outputs=["out"]', "name=x")
    )
    child = apply_changes(parent, changes)
    (stage,) = child["stages"]
    assert child["name"] == "x" and stage["outputs"] == ["out"]
    assert stage["env"] == {"A": "1", "B": "3"}
    assert stage["execution"]["keep_recoverable"] == 4
    assert stage["execution"]["max_recoveries"] == 2  # untouched keys stay as stored
    assert parent["stages"][0]["env"]["B"] == "2"  # the parent's resolution is not changed


def test_set_refuses_keys_that_may_not_change_and_bad_values(resolved):
    parent = resolved(BASE)
    with pytest.raises(WorkloadError) as caught:
        apply_changes(parent, {"command": "x", "continuity": {"mode": "restartable"}})
    assert [p.path for p in caught.value.problems] == ["--set command", "--set continuity"]
    assert caught.value.exit_status == 2
    with pytest.raises(WorkloadError, match="keep_recoverable"):
        apply_changes(parent, {"execution": {"keep_recoverable": -1}})
    with pytest.raises(WorkloadError, match="has no effect in stage 'main': only an integr"):
        apply_changes(parent, {"execution": {"save_every": 5}})  # a directory-contract stage
    integrated = resolved(BASE + 'integration = "auto"\n')
    with pytest.raises(WorkloadError, match='only save_every = "auto" reads it'):
        apply_changes(integrated, {"execution": {"max_save_overhead": 0.1}})
    auto = apply_changes(integrated, {"execution": {"save_every": "auto"}})
    assert auto["stages"][0]["execution"]["save_every"] == "auto"
    with pytest.raises(WorkloadError, match="give KEY=VALUE"):
        parse_setting("novalue")


def test_a_managed_method_is_held_to_its_own_rules_too():
    """The method rules (nodus.schemas.method_rules) run inside the one submit-time check."""
    stages = [{"name": "train", "command": ["python", "-m", "x"], "integration": "hf-trainer-v1"}]
    method = {"base_model": "/m/base", "lora_rank": 8, "kl_beta": 0.1, "gpu_count": 1}
    parent = {"stages": stages, "framework": "grpo", "method": method}
    child = {"stages": stages, "framework": "grpo", "method": {**method, "lora_rank": 16}}
    (problem,) = continuation_problems(parent, child, "full-state")
    assert problem.path == "method.lora_rank" and "the source run has 8" in problem.render()
    same = {"stages": stages, "framework": "grpo", "method": dict(method)}
    assert continuation_problems(parent, same, "full-state") == []
    (kl,) = continuation_problems(parent, same, "full-state", parent_started_from_adapter=True)
    assert kl.path == "method.kl_beta" and "inherited adapter weights" in kl.render()


def test_only_the_stage_continuing_a_full_state_parent_loses_its_epoch_saves(resolved):
    pipeline = resolved(
        'name = "w"\nintegration = "hf-trainer-v1"\n[execution]\nsave_each_epoch = true\n'
        '[[stages]]\nname = "pre"\ncommand = ["python", "a.py"]\n'
        '[[stages]]\nname = "main"\ncommand = ["python", "b.py"]\n'
    )
    (problem,) = epoch_save_problems(pipeline, "main", "full-state")
    assert problem.path == "stages[1].execution.save_each_epoch"
    assert "counted in updates, not epochs" in problem.render()
    assert epoch_save_problems(pipeline, "main", "weights") == []  # a fresh start keeps them

    branch, turned_off = without_epoch_saves(pipeline, "main", "full-state")
    assert turned_off
    assert [s["execution"]["save_each_epoch"] for s in branch["stages"]] == [True, False]
    assert epoch_save_problems(branch, "main", "full-state") == []
    assert pipeline["stages"][1]["execution"]["save_each_epoch"] is True  # a copy was changed
    assert without_epoch_saves(pipeline, "main", "weights") == (pipeline, False)
