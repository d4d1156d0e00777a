"""Rules that span several fields of a workload as written, and settings that would do nothing.

Single-field rules live on the field types (:mod:`nodus.schemas.fields`); rules on the resolved
values live in :mod:`nodus.schemas.resolve`, which calls :func:`without_effect` here once the
stages are resolved. Each check returns problems instead of raising, so a file's problems are
all reported together.

No setting is accepted without effect (docs/workload-file.md): a key whose feature is not built
yet is refused with "not supported yet", and one that cannot act where it is written is refused
saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nodus import protocol
from nodus.errors import Problem
from nodus.schemas import backends
from nodus.schemas.method_specs import in_words, method_spec, online_methods
from nodus.schemas.models import Framework, Overrides, Workload
from nodus.schemas.resolved import ResolvedStage


def _integrated(stage: ResolvedStage) -> bool:
    return stage.integration is not None


def _recovers(stage: ResolvedStage) -> bool:
    return stage.continuity.resume_on_interruption


_NO_CADENCE = (
    "only an integration saves on nodus's cadence (a program under the directory contract "
    'decides itself when it writes a checkpoint folder); remove it, or set integration = "auto" '
    'or "hf-trainer-v1"'
)
_NO_RECOVERY = (
    "resume_on_interruption is false there, so an interruption is never recovered "
    "automatically; remove it, or set [continuity] resume_on_interruption = true"
)


def _auto_cadence(stage: ResolvedStage) -> bool:
    return _integrated(stage) and stage.execution.save_every == protocol.SAVE_EVERY_AUTO


_NO_AUTO_CADENCE = (
    f'only save_every = "{protocol.SAVE_EVERY_AUTO}" reads it (the integration then picks the '
    f'cadence within it); set save_every = "{protocol.SAVE_EVERY_AUTO}", or remove it'
)


def _backend_reads(key: str) -> tuple[Callable[[ResolvedStage], bool], str]:
    """The rule for an ``[execution]`` key only some backends act on (their registry entries
    name it): the stages that act on it, and why the others do not."""
    names = [entry.name for entry in backends.REGISTRY.values() if key in entry.execution_keys]
    said = " or ".join(f'"{name}"' for name in names)
    why = (
        f'only backend = {said} places a stage on a cluster; backend "{backends.DEFAULT}" runs '
        "it as one process on this machine, with what this machine has (not supported yet); set "
        f"[execution] backend = {said}, or remove it"
    )
    return (lambda stage: stage.execution.backend in names), why


# [execution] keys that act only in some stages: (what such a stage is, why the others ignore it)
_ACTS_ONLY_WHERE = {
    "save_every": (_integrated, _NO_CADENCE),
    "save_each_epoch": (_integrated, _NO_CADENCE),
    "max_save_overhead": (_auto_cadence, _NO_AUTO_CADENCE),
    "max_recoveries": (_recovers, _NO_RECOVERY),
    **{
        key: _backend_reads(key)
        for key in dict.fromkeys(k for e in backends.REGISTRY.values() for k in e.execution_keys)
    },
}


def check_workload(workload: Workload, overrides: Overrides | None = None) -> list[Problem]:
    return [
        *_unique_stage_names(workload),
        *_shortcut(workload),
    ]


def without_effect(
    workload: Workload, overrides: Overrides | None, stages: Sequence[ResolvedStage]
) -> list[Problem]:
    """``[execution]`` keys written where no stage they reach can act on them.

    A value reaches the stages that take it (the highest level that writes the key wins), so a
    workload-wide ``save_every`` is fine as long as one of its stages is integrated.
    """
    problems = []
    for key, (acts_in, why) in _ACTS_ONLY_WHERE.items():
        reached: dict[str, tuple[object, list[ResolvedStage]]] = {}
        for index, stage in enumerate(stages):
            written = _written(key, index, workload, overrides)
            if written is not None:
                path, value = written
                reached.setdefault(path, (value, []))[1].append(stage)
        for path, (value, taken_by) in reached.items():
            if not any(acts_in(stage) for stage in taken_by):
                problems.append(
                    Problem(path, f"has no effect in {_named(taken_by)}: {why}", value, True)
                )
    return problems


def execution_without_effect(
    path: str, key: str, value: object, stages: Sequence[ResolvedStage]
) -> Problem | None:
    """``execution.<key>`` set (at ``path``) for ``stages`` where none of them acts on it."""
    rule = _ACTS_ONLY_WHERE.get(key)
    if rule is None or any(rule[0](stage) for stage in stages):
        return None
    return Problem(path, f"has no effect in {_named(stages)}: {rule[1]}", value, True)


def _written(
    key: str, index: int, workload: Workload, overrides: Overrides | None
) -> tuple[str, object] | None:
    """Where the ``execution.<key>`` stage ``index`` takes is written, and its value."""
    # a shortcut's stages are generated: its [[stages]] entries (refused) are none of them
    written_stages = workload.stages if not workload.given("framework") else None
    entry = written_stages[index] if written_stages else None
    levels = (
        ("(command line) execution", overrides),
        (f"stages[{index}].execution", entry),
        ("execution", workload),
    )
    for where, level in levels:
        execution = level.execution if level is not None and level.given("execution") else None
        if execution is not None and execution.given(key):
            return f"{where}.{key}", getattr(execution, key)
    return None


def _named(stages: Sequence[ResolvedStage]) -> str:
    names = ", ".join(repr(stage.name) for stage in stages)
    return f"stages {names}" if len(stages) > 1 else f"stage {names}"


def _unique_stage_names(workload: Workload) -> list[Problem]:
    seen: dict[str, int] = {}
    problems = []
    for index, stage in enumerate(workload.stages or ()):
        if stage.name in seen:
            problems.append(
                Problem(
                    f"stages[{index}].name",
                    f"stage names must be unique; stages[{seen[stage.name]}] has it too",
                    stage.name,
                    True,
                )
            )
        seen.setdefault(stage.name, index)
    return problems


# Top-level keys a shortcut generates itself: (key, why it cannot be written next to it).
_GENERATED = {
    "command": "the shortcut runs nodus's own train and export programs",
    "integration": "the shortcut's train stage always runs under hf-trainer-v1",
}
_EXECUTION_FROM_METHOD = {
    "save_every": "checkpoint_every",
    "keep_recoverable": "checkpoint_keep",
    "keep_adapters": "checkpoint_keep",
}


def _shortcut(workload: Workload) -> list[Problem]:
    """A framework shortcut and its [method] table go together, and generate the stages."""
    framework = workload.framework if workload.given("framework") else None
    if framework is None:
        if workload.given("method"):
            return [Problem("method", "a [method] table needs framework = 'sft', 'dpo' or 'grpo'")]
        return []
    problems = [*_method_problems(workload, framework)]
    for key, why in _GENERATED.items():
        if workload.given(key):
            value = getattr(workload, key)
            shown = (
                list(value) if isinstance(value, tuple | list) else getattr(value, "value", value)
            )
            problems.append(
                Problem(key, f"cannot be written next to a framework shortcut: {why}", shown, True)
            )
    if workload.execution is not None and workload.given("execution"):
        for key, method_key in _EXECUTION_FROM_METHOD.items():
            if workload.execution.given(key):
                problems.append(
                    Problem(
                        f"execution.{key}",
                        f"a framework shortcut sets it from [method] {method_key}; "
                        f"write that instead",
                        getattr(workload.execution, key),
                        True,
                    )
                )
    outputs = workload.outputs
    if outputs is not None and workload.given("outputs") and len(outputs) != 1:
        problems.append(
            Problem(
                "outputs",
                "a framework shortcut exports its model into one folder; give exactly one",
                list(outputs),
                True,
            )
        )
    problems.extend(_shortcut_stages(workload))
    return problems


def _shortcut_stages(workload: Workload) -> list[Problem]:
    """The shortcut generates its stages; entries of one's own are refused."""
    problems = []
    for index, stage in enumerate(workload.stages or ()):
        if stage.continuity is not None and stage.continuity.given("checkpoint_paths"):
            problems.append(
                Problem(
                    f"stages[{index}].continuity.checkpoint_paths",
                    "stage-specific checkpoint_paths cannot be combined with a framework "
                    "shortcut; set checkpoint_paths at the top level, or write the stages "
                    "without the shortcut",
                    list(stage.continuity.checkpoint_paths or ()),
                    True,
                )
            )
        else:
            problems.append(
                Problem(
                    f"stages[{index}]",
                    "a framework shortcut generates its stages (train, export); remove "
                    "[[stages]], or write every stage without the shortcut",
                    stage.name,
                    True,
                )
            )
    return problems


def _method_problems(workload: Workload, framework: Framework) -> list[Problem]:
    method = workload.method
    if method is None:
        return [Problem("method", f"framework = '{framework.value}' needs a [method] table")]
    problems = []
    if method.given("max_steps") == method.given("num_epochs"):
        problems.append(Problem("method", "give exactly one of max_steps and num_epochs"))
    spec = method_spec(framework)
    online = spec is not None and spec.online
    if online and not method.reward_functions:
        problems.append(
            Problem(
                "method.reward_functions", f"{framework.value} needs at least one 'module:function'"
            )
        )
    if not online and method.given("reward_functions"):
        used_by = in_words(online_methods())
        problems.append(
            Problem("method.reward_functions", f"reward functions are used by {used_by} only")
        )
    return problems
