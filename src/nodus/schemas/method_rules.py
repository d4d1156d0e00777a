"""What a run of a managed method may change when it continues another run (docs/methods.md).

:func:`method_continuation_problems` is pure: two resolved workloads as the catalog stores them
(``ResolvedWorkload.to_dict()``), how the child starts from the parent, and whether the parent
itself started from inherited adapter weights. It is called by the submit-time continuation
check (``nodus.schemas.continuation``), so a broken rule is refused before anything runs. Each
problem names the rule and both values.

Modes:

- ``full-state`` (``resume_from = "RUN@STEP"``, ``runs branch --from full-state``): the child
  continues the parent's training state, so everything that state depends on stays: method,
  base_model, dataset and its fingerprint, the LoRA settings, gpu_count, and every setting that
  becomes a training argument (learning rate, batch size, accumulation, seed, lengths, grpo's
  generation settings and kl_beta); the parent's reward functions are reused and new ones are
  refused. ``max_steps``/``num_epochs``, the name, outputs and resources may change.
- ``weights`` (a warm start from the parent's weights): a new training; only the grpo KL rule
  below applies.

grpo with ``kl_beta > 0`` (the seeds' klBeta rules): the reference policy of a run that started
from inherited adapter weights is that adapter, which a restore does not rebuild, so a
full-state branch of such a run is refused; and a run starting from another run's adapter may
penalise towards it only on one device (on more, the reference would be the base model).
"""

from __future__ import annotations

from typing import Any

from nodus.errors import Problem
from nodus.protocol import FULL_STATE, MODE_WEIGHTS
from nodus.schemas.method_specs import method_spec

__all__ = ["KEPT", "KEPT_ARGUMENTS", "method_continuation_problems"]

KEPT = (
    "base_model",
    "dataset",
    "dataset_fingerprint",
    "base_model_fingerprint",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "load_in_4bit",
    "gpu_count",
)
"""``[method]`` settings a full-state continuation keeps (the training state depends on them)."""

KEPT_ARGUMENTS = (
    "learning_rate",
    "batch_size",
    "gradient_accumulation_steps",
    "seed",
    "max_length",
    "num_generations",
    "kl_beta",
    "steps_per_generation",
)
"""``[method]`` settings that become the trainer's training arguments: the restored checkpoint
was saved with them, and the attempt that restores it refuses other ones. Known at submit, so a
continuation that changes one is refused then, naming both values, not once it starts. Only the
length (``max_steps``, ``num_epochs``) may change."""

_RULE_ARGUMENT = (
    "a run that continues another's training state keeps {key}: the source run's checkpoint "
    "was saved with the training arguments it sets"
)

_RULE_KEEPS = "a run that continues another's training state keeps {key}"
_RULE_REWARDS = (
    "a run that continues another's training state reuses its reward functions; "
    "remove reward_functions (they come from the source run)"
)
_RULE_KL_INHERITED = (
    "grpo with kl_beta > 0 cannot continue the training state of a run that started from "
    "inherited adapter weights: the restore does not rebuild its frozen reference adapter; "
    "set kl_beta = 0 or start from its weights"
)
_RULE_KL_DEVICES = (
    "grpo with kl_beta > 0 starting from another run's adapter needs gpu_count = 1: on more "
    "devices the reference policy is the base model, not the adapter it starts from"
)


def method_continuation_problems(
    parent: dict[str, Any],
    child: dict[str, Any],
    mode: str,
    *,
    parent_started_from_adapter: bool = False,
) -> list[Problem]:
    """Every method rule ``child`` breaks by starting from ``parent`` in ``mode``."""
    if mode not in (FULL_STATE, MODE_WEIGHTS):
        raise ValueError(f"mode must be {FULL_STATE!r} or {MODE_WEIGHTS!r}, not {mode!r}")
    before, after = parent.get("framework"), child.get("framework")
    if before is None and after is None:
        return []  # neither is a managed method: nothing of theirs to keep
    old, new = dict(parent.get("method") or {}), dict(child.get("method") or {})
    if mode == MODE_WEIGHTS:
        return _weights_problems(after, old, new)
    if before != after:
        message = _RULE_KEEPS.format(key="its method") + f": the source run has {_shown(before)}"
        return [Problem("framework", message, after, True)]
    problems = [
        Problem(f"method.{key}", _kept(key, old), new.get(key), True)
        for key in KEPT
        if old.get(key) != new.get(key)
    ]
    problems += [
        Problem(
            f"method.{key}",
            f"{_RULE_ARGUMENT.format(key=key)}: the source run has {_shown(old.get(key))}",
            new.get(key),
            True,
        )
        for key in KEPT_ARGUMENTS
        if key in old and old.get(key) != new.get(key)
    ]
    problems += _reward_problems(old, new)
    if _penalised(after, new) and parent_started_from_adapter:
        problems.append(Problem("method.kl_beta", _RULE_KL_INHERITED, new["kl_beta"], True))
    return problems


def _weights_problems(framework: Any, old: dict[str, Any], new: dict[str, Any]) -> list[Problem]:
    """A run warm-started from the parent's weights; only the adapter KL rule applies."""
    from_adapter = bool(old.get("lora_rank"))
    if from_adapter and _penalised(framework, new) and new.get("gpu_count", 1) > 1:
        message = f"{_RULE_KL_DEVICES}; this run has gpu_count = {new['gpu_count']}"
        return [Problem("method.kl_beta", message, new["kl_beta"], True)]
    return []


def _reward_problems(old: dict[str, Any], new: dict[str, Any]) -> list[Problem]:
    given = new.get("reward_functions")
    if not given or given == old.get("reward_functions"):
        return []
    message = f"{_RULE_REWARDS}; the source run has {_shown(old.get('reward_functions'))}"
    return [Problem("method.reward_functions", message, list(given), True)]


def _penalised(framework: Any, method: dict[str, Any]) -> bool:
    """An online method (grpo) penalising towards its reference policy (``kl_beta > 0``)."""
    spec = method_spec(framework)
    return spec is not None and spec.online and (method.get("kl_beta") or 0) > 0


def _kept(key: str, old: dict[str, Any]) -> str:
    return f"{_RULE_KEEPS.format(key=key)}: the source run has {_shown(old.get(key))}"


def _shown(value: Any) -> str:
    return "none" if value is None else repr(value)
