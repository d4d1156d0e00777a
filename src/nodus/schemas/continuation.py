"""A run that starts from another run's snapshot: what it may change, what must stay the same.

Two ways lead there, both checked at submit by the runner (:mod:`nodus.runner.upkeep.lineage`):

- ``resume_from = "RUN@STEP"`` (``nodus run FILE --resume-from REF``): a new workload file
  continues the parent's training state (mode ``full-state``);
- ``nodus runs branch SNAPSHOT --from full-state|weights [--set KEY=VALUE]``: the parent's own
  stored resolution, with the changes ``--set`` gives (:func:`apply_changes`).

What must equal the parent's, compared on the resolved workloads as the catalog stores them
(:func:`continuation_problems`):

    full-state   the stage names, each stage's command and integration (under hf-trainer-v1 the
                 integration checks the rest when the restored attempt starts: program, model
                 structure, trainable parameters, dataset content, training arguments other
                 than the length: max_steps and num_train_epochs)
    weights      the stage names and each stage's integration (the weights must load into the
                 same model: under hf-trainer-v1 the model structure and trainable parameters
                 are checked when the attempt starts)

What may change (:data:`MAY_CHANGE`): the run's ``name``, ``outputs``, ``env`` (how a program
learns a longer ``max_steps`` or more epochs), the ``[execution]`` table (save cadence,
retention, recoveries, grace period, resources). Anything else (``command``, ``code``,
``integration``, ``continuity``) is refused by ``--set`` naming the key.

A ``full-state`` continuation makes no epoch-end saves in the stage that continues the parent
(docs/methods.md): it goes on from the parent's position in the data, and its length
is counted in updates, not epochs. ``save_each_epoch = true`` there is refused
(:func:`epoch_save_problems`); a branch's inherited true is turned off in its stored resolution
(:func:`without_epoch_saves`), so the integration simply makes none. A ``weights`` branch is a
fresh start and keeps them.

Managed methods add their own rules (method, base model, dataset and its fingerprint, LoRA
settings, gpu_count, reward functions, grpo's KL rules) in :mod:`nodus.schemas.method_rules`,
called from :func:`continuation_problems`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from nodus.errors import Problem, WorkloadError
from nodus.protocol import CONTINUATION_MODES, FULL_STATE, MODE_WEIGHTS
from nodus.schemas.method_rules import method_continuation_problems

__all__ = [
    "EPOCH_SAVES_RULE",
    "MAY_CHANGE",
    "apply_changes",
    "continuation_problems",
    "epoch_save_problems",
    "parse_setting",
    "settings_table",
    "without_epoch_saves",
]

MAY_CHANGE = ("name", "outputs", "env", "execution")
"""Top-level keys a run may set differently from the run it continues (``--set`` accepts them:
``name``, ``outputs``, ``env.VAR``, ``execution.KEY``)."""

EPOCH_SAVES_RULE = (
    "a run that continues another's training state (resume_from, runs branch --from "
    "full-state) makes no epoch-end saves in the stage that continues it: it goes on from the "
    "parent's position in the data, and its length is counted in updates, not epochs"
)

# What each mode keeps equal, per stage: a branch from weights may run another program on them.
_EQUAL_PER_STAGE = {FULL_STATE: ("command", "integration"), MODE_WEIGHTS: ("integration",)}


def continuation_problems(
    parent: dict, child: dict, mode: str, *, parent_started_from_adapter: bool = False
) -> list[Problem]:
    """Every way ``child`` (a resolved workload dict) may not continue ``parent`` in ``mode``.

    Each problem names the field and both values; [] means the child may start from the
    parent's snapshot. ``parent_started_from_adapter``: the parent's own training began from
    another run's weights (a managed method's KL rules depend on it).
    """
    if mode not in CONTINUATION_MODES:
        return [Problem("--from", f"give one of {', '.join(CONTINUATION_MODES)}", mode, True)]
    names = [stage["name"] for stage in parent["stages"]]
    child_names = [stage["name"] for stage in child["stages"]]
    if names != child_names:
        return [_differs("stages[*].name", names, child_names)]
    problems = []
    for index, (before, after) in enumerate(zip(parent["stages"], child["stages"], strict=True)):
        for key in _EQUAL_PER_STAGE[mode]:
            if before.get(key) != after.get(key):
                problems.append(_differs(f"stages[{index}].{key}", before[key], after.get(key)))
    problems += method_continuation_problems(
        parent, child, mode, parent_started_from_adapter=parent_started_from_adapter
    )
    return problems


def _differs(path: str, parent_value: Any, child_value: Any) -> Problem:
    return Problem(
        path,
        f"must equal the source run's {parent_value!r} (this run has {child_value!r}): a run "
        f"that continues another keeps it; {', '.join(MAY_CHANGE)} may change",
        child_value,
        True,
    )


# --- epoch-end saves ------------------------------------------------------------------------------


def epoch_save_problems(
    child: Mapping[str, Any], stage: str, mode: str, field: str | None = None
) -> list[Problem]:
    """``save_each_epoch = true`` in ``stage`` (the one continuing the parent) of a ``full-state``
    continuation: refused naming the rule. ``field`` is where the user wrote it (default: the
    resolved stage's path)."""
    if mode != FULL_STATE:
        return []  # a weights branch starts fresh: its epochs are its own
    for index, resolved in enumerate(child["stages"]):
        if resolved["name"] == stage and resolved["execution"].get("save_each_epoch"):
            return [
                Problem(
                    field or f"stages[{index}].execution.save_each_epoch",
                    f"{EPOCH_SAVES_RULE}; remove it (a branch --from weights keeps epoch saves)",
                    True,
                    True,
                )
            ]
    return []


def without_epoch_saves(
    resolved: Mapping[str, Any], stage: str, mode: str
) -> tuple[dict[str, Any], bool]:
    """``resolved`` with ``stage``'s ``save_each_epoch`` off for a ``full-state`` continuation
    (a branch inherits the parent's true); (the workload, whether a true was turned off)."""
    child = copy.deepcopy(dict(resolved))
    if mode != FULL_STATE:
        return child, False
    turned_off = False
    for each in child["stages"]:
        if each["name"] == stage and each["execution"].get("save_each_epoch"):
            each["execution"]["save_each_epoch"] = False
            turned_off = True
    return child, turned_off


# --- runs branch --set ---------------------------------------------------------------------------


def parse_setting(text: str) -> tuple[str, Any]:
    """One ``--set KEY=VALUE``: the dotted key and the value.

    VALUE is read as a TOML value (``5``, ``true``, ``["out"]``, ``"text"``), else taken as the
    text itself, so ``--set name=longer`` needs no quotes; an ``env.VAR`` value is always text
    (``--set env.MAX_STEPS=40`` sets ``"40"``).
    """
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise WorkloadError([Problem("--set", "give KEY=VALUE", text, True)])
    import tomllib  # here: a run whose resolution is remembered never parses TOML

    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value
    # An environment variable is text: `env.MAX_STEPS=800` means the string "800".
    return key, value if key.startswith("env.") and not isinstance(parsed, str) else parsed


def settings_table(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """(dotted key, value) pairs as a nested table; a key given twice is refused."""
    table: dict[str, Any] = {}
    for key, value in items:
        *parents, leaf = key.split(".")
        level = table
        for part in parents:
            level = level.setdefault(part, {})
            if not isinstance(level, dict):
                shown = not key.startswith("env.")  # a variable's value is never echoed
                raise WorkloadError([Problem(f"--set {key}", "set twice", value, shown)])
        if leaf in level:
            shown = not key.startswith("env.")  # a variable's value is never echoed
            raise WorkloadError([Problem(f"--set {key}", "set twice", value, shown)])
        level[leaf] = value
    return table


def apply_changes(resolved: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``resolved`` (a stored resolution) with ``changes`` (:func:`settings_table`) applied the
    way the command line's overrides apply to a workload: they win over every stage.

    A key outside :data:`MAY_CHANGE` is refused naming it; values are checked by the workload
    models, so ``--set execution.save_every=-1`` is refused as the file's would be.
    """
    refused = [
        Problem(
            f"--set {key}",
            f"may not change in a run that continues another; only {', '.join(MAY_CHANGE)} may",
            changes[key],
            True,
        )
        for key in changes
        if key not in MAY_CHANGE
    ]
    refused.extend(_secrets_set_as_env(resolved, changes.get("env") or {}))
    if refused:
        raise WorkloadError(refused)
    from nodus.schemas.models import Overrides  # pydantic: only when a branch is made
    from nodus.schemas.resolve import overridden_stage

    overrides = Overrides.model_validate(dict(changes))
    child = copy.deepcopy(dict(resolved))
    if overrides.given("name"):
        child["name"] = overrides.name
    child["stages"] = [overridden_stage(stage, overrides) for stage in child["stages"]]
    _refuse_without_effect(child, changes.get("execution") or {})
    return child


def _secrets_set_as_env(resolved: Mapping[str, Any], env: Mapping[str, Any]) -> list[Problem]:
    """``--set env.VAR`` for a variable a stage takes as a secret: its value would be stored."""
    secrets = {name for stage in resolved["stages"] for name in stage.get("secrets") or ()}
    return [
        Problem(
            f"--set env.{name}",
            "is a secret of this run: its value comes only from the environment of whoever "
            "runs the attempt; set it there",
        )
        for name in sorted(secrets & set(env))
    ]


def _refuse_without_effect(child: dict[str, Any], execution: Mapping[str, Any]) -> None:
    """No setting is accepted without effect: ``--set execution.save_every`` needs an
    integrated stage, ``execution.max_recoveries`` one that recovers (docs/workload-file.md)."""
    from nodus.schemas.resolved import ResolvedWorkload
    from nodus.schemas.rules import execution_without_effect

    stages = ResolvedWorkload.from_dict(child).stages
    problems = [
        execution_without_effect(f"--set execution.{key}", key, value, stages)
        for key, value in execution.items()
    ]
    if any(problems):
        raise WorkloadError([problem for problem in problems if problem is not None])
