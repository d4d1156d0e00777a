"""The managed methods' continuation rules, as the pure function the submit check calls."""

from __future__ import annotations

import copy

import pytest

from nodus.schemas.method_rules import KEPT, KEPT_ARGUMENTS, method_continuation_problems

SFT = {
    "framework": "sft",
    "method": {
        "framework": "sft",
        "base_model": "/models/base",
        "dataset": "/data/train.jsonl",
        "dataset_fingerprint": "xxh3-128:aaaa",
        "max_steps": 100,
        "num_epochs": None,
        "lora_rank": 8,
        "lora_alpha": 16.0,
        "lora_dropout": 0.05,
        "lora_target_modules": ["c_attn"],
        "load_in_4bit": False,
        "gpu_count": 1,
        "reward_functions": None,
        "kl_beta": None,
        "learning_rate": 5e-5,
        "batch_size": 2,
        "gradient_accumulation_steps": 1,
        "seed": 42,
        "max_length": 64,
        "num_generations": None,
        "steps_per_generation": None,
    },
}
GRPO = copy.deepcopy(SFT)
GRPO["framework"] = GRPO["method"]["framework"] = "grpo"
GRPO["method"].update(reward_functions=["rewards:length"], kl_beta=0.0)


def changed(workload: dict, framework: str | None = None, **method) -> dict:
    child = copy.deepcopy(workload)
    child["method"].update(method)
    if framework is not None:
        child["framework"] = child["method"]["framework"] = framework
    return child


def rendered(problems) -> list[str]:
    return [problem.render() for problem in problems]


def test_what_may_change_changes():
    child = changed(SFT, max_steps=500, num_epochs=None)
    assert method_continuation_problems(SFT, child, "full-state") == []


@pytest.mark.parametrize(
    "key, value",
    [
        ("base_model", "/models/other"),
        ("dataset", "/data/other.jsonl"),
        ("dataset_fingerprint", "xxh3-128:bbbb"),
        ("lora_rank", 16),
        ("lora_alpha", 32.0),
        ("lora_dropout", 0.1),
        ("lora_target_modules", ["c_attn", "c_proj"]),
        ("load_in_4bit", True),
        ("gpu_count", 2),
    ],
)
def test_full_state_keeps_each_setting_naming_the_rule_and_both_values(key, value):
    assert key in KEPT
    (line,) = rendered(
        method_continuation_problems(SFT, changed(SFT, **{key: value}), "full-state")
    )
    assert line.startswith(f"method.{key}: {value!r} — ")
    assert f"keeps {key}" in line
    assert f"the source run has {SFT['method'][key]!r}" in line


@pytest.mark.parametrize(
    "key, value",
    [
        ("learning_rate", 1e-4),
        ("batch_size", 4),
        ("gradient_accumulation_steps", 2),
        ("seed", 7),
        ("max_length", 128),
    ],
)
def test_full_state_keeps_each_training_argument_refused_at_submit_with_both_values(key, value):
    """A setting the trainer's arguments are made of would be refused by the restored attempt
    (its checkpoint was saved with the old value): refused at submit instead, both values named."""
    assert key in KEPT_ARGUMENTS
    (line,) = rendered(
        method_continuation_problems(SFT, changed(SFT, **{key: value}), "full-state")
    )
    assert line.startswith(f"method.{key}: {value!r} — ")
    assert f"keeps {key}: the source run's checkpoint was saved with" in line
    assert f"the source run has {SFT['method'][key]!r}" in line
    assert method_continuation_problems(SFT, changed(SFT, **{key: value}), "weights") == []


def test_grpo_generation_settings_and_kl_beta_are_kept_too():
    parent = changed(GRPO, num_generations=4, steps_per_generation=2, kl_beta=0.1)
    for key, value in (("num_generations", 8), ("steps_per_generation", 4), ("kl_beta", 0.2)):
        (line,) = rendered(
            method_continuation_problems(parent, changed(parent, **{key: value}), "full-state")
        )
        assert line.startswith(f"method.{key}: {value!r} — ")


def test_full_state_keeps_the_method():
    (line,) = rendered(method_continuation_problems(SFT, changed(SFT, "dpo"), "full-state"))
    assert line == (
        "framework: 'dpo' — a run that continues another's training state keeps its method: "
        "the source run has 'sft'"
    )


def test_a_managed_run_cannot_continue_as_a_plain_one():
    plain = {"framework": None, "method": {}}
    (line,) = rendered(method_continuation_problems(SFT, plain, "full-state"))
    assert line.startswith("framework: None — ") and "the source run has 'sft'" in line


def test_plain_runs_have_no_method_rules():
    plain = {"framework": None, "method": {}}
    assert method_continuation_problems(plain, plain, "full-state") == []


def test_reward_functions_are_reused_and_new_ones_refused():
    same = changed(GRPO, reward_functions=["rewards:length"])
    omitted = changed(GRPO, reward_functions=None)
    assert method_continuation_problems(GRPO, same, "full-state") == []
    assert method_continuation_problems(GRPO, omitted, "full-state") == []
    new = changed(GRPO, reward_functions=["rewards:length", "rewards:format"])
    (line,) = rendered(method_continuation_problems(GRPO, new, "full-state"))
    assert line.startswith("method.reward_functions: ['rewards:length', 'rewards:format'] — ")
    assert "reuses its reward functions" in line and "['rewards:length']" in line


def test_kl_beta_full_state_branch_of_a_run_started_from_an_inherited_adapter_is_refused():
    parent = changed(GRPO, kl_beta=0.04)
    child = changed(parent)  # kl_beta is a training argument: a continuation keeps it
    assert method_continuation_problems(parent, child, "full-state") == []
    (line,) = rendered(
        method_continuation_problems(parent, child, "full-state", parent_started_from_adapter=True)
    )
    assert line.startswith("method.kl_beta: 0.04 — ") and "inherited adapter weights" in line
    no_penalty = changed(GRPO, kl_beta=0.0)
    assert (
        method_continuation_problems(
            GRPO, no_penalty, "full-state", parent_started_from_adapter=True
        )
        == []
    )


def test_kl_beta_from_another_runs_adapter_only_on_one_device():
    one = changed(GRPO, kl_beta=0.04)
    assert method_continuation_problems(GRPO, one, "weights") == []
    two = changed(GRPO, kl_beta=0.04, gpu_count=2)
    (line,) = rendered(method_continuation_problems(GRPO, two, "weights"))
    assert line.startswith("method.kl_beta: 0.04 — ") and "gpu_count = 2" in line
    full_weights = changed(GRPO, lora_rank=None)
    assert method_continuation_problems(full_weights, two, "weights") == []


def test_a_weights_start_may_change_the_rest():
    child = changed(SFT, "dpo", base_model="/models/other", lora_rank=4, dataset="/d.jsonl")
    assert method_continuation_problems(SFT, child, "weights") == []


def test_an_unknown_mode_is_a_programming_error():
    with pytest.raises(ValueError, match="mode must be"):
        method_continuation_problems(SFT, SFT, "sideways")
