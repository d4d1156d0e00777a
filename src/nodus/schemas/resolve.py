"""Resolution: a checked :class:`Workload` becomes the explicit :class:`ResolvedWorkload`.

Precedence, for every field of every stage:

    command line (overrides) > stage > workload > nodus's defaults (schemas/defaults.py)

A value counts only where it was written (pydantic's ``model_fields_set``), so a default in a
stage never hides what the workload says. Per field:

- ``code``, ``command``, ``integration``, ``outputs``: the highest level that gives one.
  ``integration = "none"`` opts a stage out of an inherited selection.
- ``env``: merged; a higher level's variable replaces a lower one's.
- ``secrets``: merged; the workload's names first, then each stage's new ones. A name also
  in the stage's resolved ``env`` is refused: a secret's value never lies in the file.
- ``execution``: key by key, so a stage can change ``save_every`` and keep the rest.
- ``continuity``: ``mode`` key by key (default ``checkpointed``); the resume flag comes from the
  level that sets it, except that a level setting a mode without a flag takes that mode's default
  (``checkpointed`` → true, ``restartable`` → false); ``checkpoint_paths`` from the highest
  level with a non-empty list, else ``["state"]`` — even when the stage sets its own mode;
  ``checkpoint_complete``, ``checkpoint_name``, ``step_key``, ``resume_args`` and ``metrics``
  key by key
  (default none).

Rules that need the resolved values (an integration needs checkpointed continuity and the state
folder; the directory contract's keys do nothing under ``hf-trainer-v1``) are checked here too;
every problem of the file is reported at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from nodus import protocol
from nodus.errors import Problem, WorkloadError
from nodus.schemas import defaults, methods
from nodus.schemas.fields import normal_path
from nodus.schemas.models import (
    ContinuityMode,
    Execution,
    Integration,
    Overrides,
    Stage,
    Workload,
    _StageFields,
)
from nodus.schemas.resolved import (
    ResolvedContinuity,
    ResolvedExecution,
    ResolvedStage,
    ResolvedWorkload,
)
from nodus.schemas.rules import check_workload, without_effect

_STATE_SELECTIONS = (protocol.STATE_DIR, ".")
_PREPARED = (Integration.AUTO, Integration.HF_TRAINER_V1)


def resolve(
    workload: Workload,
    *,
    base_dir: str | None = None,
    overrides: Overrides | Mapping[str, Any] | None = None,
) -> ResolvedWorkload:
    """Resolve ``workload``; code folders are relative to ``base_dir``.

    ``base_dir`` defaults to the folder of the file the workload was loaded from, else the current
    directory. Raises :class:`WorkloadError` listing every problem.
    """
    table = _overrides_table(overrides)
    if base_dir is None:
        base_dir = os.path.dirname(workload.source) if workload.source else os.getcwd()
    problems = check_workload(workload, table)
    method: dict[str, Any] = {}
    generated = None
    framework = workload.framework if workload.given("framework") else None
    if framework is not None:
        if workload.method is None:  # check_workload named the missing table
            raise WorkloadError(problems, workload.source)
        code = os.path.join(os.path.abspath(base_dir), _pick([table, workload], "code", "."))
        method, method_problems = methods.resolve_method(
            framework, workload.method, os.path.abspath(base_dir), os.path.normpath(code)
        )
        problems.extend(method_problems)
        generated = methods.generated_stages(workload, method)
    stages = []
    for prefix, name, layers in _stage_layers(workload, table, generated):
        stage, stage_problems = _resolve_stage(prefix, name, layers, os.path.abspath(base_dir))
        stages.append(stage)
        problems.extend(stage_problems)
    problems.extend(without_effect(workload, table, stages))
    if problems:
        raise WorkloadError(problems, workload.source)
    if generated is not None:  # the generated programs read their settings from the environment
        variables = methods.method_environment(method)
        stages = [replace(stage, env={**stage.env, **variables}) for stage in stages]
    return ResolvedWorkload(
        name=_pick([table, workload], "name", None),
        stages=tuple(stages),
        source=os.path.abspath(workload.source) if workload.source else "",
        resume_from=_pick([table, workload], "resume_from", None),
        framework=framework.value if framework is not None else None,
        method=method,
    )


def _overrides_table(overrides: Overrides | Mapping[str, Any] | None) -> Overrides | None:
    """The command line's overrides as a checked table (a mapping is validated into one)."""
    if overrides is None or isinstance(overrides, Overrides):
        return overrides
    return Overrides.model_validate(dict(overrides))


def _stage_layers(
    workload: Workload, overrides: Overrides | None, generated: list[Stage] | None = None
) -> Iterator[tuple[str, str, list[Any]]]:
    """(path prefix, stage name, layers highest first); no ``[[stages]]`` = one stage "main";
    a framework shortcut's generated stages lie over the workload like written ones."""
    top = [layer for layer in (overrides,) if layer is not None]
    if generated is not None:
        for stage in generated:
            yield "", stage.name, [*top, stage, workload]
        return
    if not workload.stages:
        yield "", defaults.STAGE_NAME, [*top, workload]
        return
    for index, stage in enumerate(workload.stages):
        yield f"stages[{index}].", stage.name, [*top, stage, workload]


def _resolve_stage(
    prefix: str, name: str, layers: Sequence[_StageFields], base_dir: str
) -> tuple[ResolvedStage, list[Problem]]:
    problems: list[Problem] = []
    command = _pick(layers, "command", None)
    if command is None:
        problems.append(Problem(f"{prefix}command", _missing_command(prefix)))
    code, code_problems = _code(prefix, layers, base_dir)
    problems.extend(code_problems)
    integration = _pick(layers, "integration", None)
    continuity = _continuity(layers)
    problems.extend(_integration_problems(prefix, layers, name, integration, continuity))
    stage = ResolvedStage(
        name=name,
        command=tuple(command or ()),
        code=code,
        env=_env(layers),
        outputs=tuple(normal_path(p) for p in _pick(layers, "outputs", ())),
        integration=None if integration in (None, Integration.NONE) else integration.value,
        continuity=continuity,
        execution=_execution(layers),
        secrets=_secrets(layers),
    )
    problems.extend(_secret_problems(prefix, layers, stage))
    return stage, problems


def _code(prefix: str, layers: Sequence[_StageFields], base_dir: str) -> tuple[str, list[Problem]]:
    """The absolute code folder; it must exist now, since the run captures it at acceptance."""
    written = _pick(layers, "code", defaults.CODE)
    code = os.path.normpath(os.path.join(base_dir, written))
    if os.path.isdir(code):
        return code, []
    where = _origin(prefix, layers, "code")
    return code, [Problem(where, f"the code folder does not exist: {code}", written, True)]


def _missing_command(prefix: str) -> str:
    if prefix:
        return "every stage needs a command: give one here or at the top level"
    return "give the program to run, e.g. command = ['python', 'train.py']"


def _pick(layers: Sequence[Any], field: str, default: Any) -> Any:
    """The value of the highest layer that wrote ``field``, else ``default``."""
    for layer in layers:
        if layer is not None and layer.given(field):
            return getattr(layer, field)
    return default


def _origin(prefix: str, layers: Sequence[Any], field: str) -> str:
    """The path of the field where the value in force was written (stage or workload)."""
    for layer in layers:
        if layer.given(field):
            return _path_in(prefix, layers, layer, field)
    return field


def _path_in(prefix: str, layers: Sequence[Any], layer: Any, field: str) -> str:
    """The path of ``field`` as written in ``layer`` (command line, stage or workload)."""
    if isinstance(layer, Overrides):
        return f"(command line) {field}"
    return f"{prefix}{field}" if layer is not layers[-1] else field


def _env(layers: Sequence[_StageFields]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for layer in reversed(layers):  # lowest first, so higher levels replace
        merged.update(layer.env or {})
    return merged


def _secrets(layers: Sequence[_StageFields]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for layer in reversed(layers):  # lowest first: the workload's names, then the stage's
        names.update(dict.fromkeys(getattr(layer, "secrets", None) or ()))
    return tuple(names)


def _secret_problems(
    prefix: str, layers: Sequence[_StageFields], stage: ResolvedStage
) -> list[Problem]:
    """A secret named in ``env`` too: its value would be stored with the run (and one of the
    two would silently win), so the name is refused where the secret was written."""
    problems = []
    for name in sorted(set(stage.secrets) & set(stage.env)):
        written = next(layer for layer in layers if name in (getattr(layer, "secrets", None) or ()))
        problems.append(
            Problem(
                _path_in(prefix, layers, written, "secrets"),
                f"{name!r} is also set in env of stage '{stage.name}': a secret's value comes "
                "only from the environment of whoever runs the attempt; remove it from env",
                name,
                True,
            )
        )
    return problems


def _execution(layers: Sequence[_StageFields]) -> ResolvedExecution:
    tables = [layer.execution for layer in layers if layer.given("execution")]
    values = {
        name: _pick(tables, name, info.default) for name, info in Execution.model_fields.items()
    }
    values["grace_period"] = float(values["grace_period"])
    values["cpus"] = float(values["cpus"])
    values["max_save_overhead"] = float(values["max_save_overhead"])
    values["backend"] = str(getattr(values["backend"], "value", values["backend"]))
    values["memory"] = int(values["memory"])
    values["sbatch_options"] = tuple(values["sbatch_options"])
    return ResolvedExecution(**values)


def _continuity(layers: Sequence[_StageFields]) -> ResolvedContinuity:
    tables = [
        layer.continuity
        for layer in layers
        if layer.continuity is not None and layer.given("continuity")
    ]
    mode = _pick(tables, "mode", ContinuityMode(defaults.CONTINUITY_MODE))
    resume: bool | None = defaults.RESUME_ON_INTERRUPTION[mode.value]
    for table in tables:
        if table.given("resume_on_interruption"):
            resume = table.resume_on_interruption
            break
        if table.given("mode"):  # a new mode brings its own default flag
            break
    written = next((t.checkpoint_paths for t in tables if t.checkpoint_paths), None)
    paths = written or defaults.CHECKPOINT_PATHS
    return ResolvedContinuity(
        mode.value,
        bool(resume),
        tuple(normal_path(p) for p in paths),
        _pick(tables, "checkpoint_complete", None),
        _pick(tables, "checkpoint_name", None),
        tuple(_pick(tables, "resume_args", None) or ()),
        _metrics_place(_pick(tables, "metrics", None)),
        _pick(tables, "step_key", None),
    )


def _metrics_place(place: str | None) -> str | None:
    return None if place is None else normal_path(place)


def _integration_problems(
    prefix: str,
    layers: Sequence[_StageFields],
    stage: str,
    integration: Integration | None,
    continuity: ResolvedContinuity,
) -> list[Problem]:
    """Explicit ``auto``/``hf-trainer-v1`` need checkpointed continuity and the state folder."""
    if integration not in _PREPARED:
        return []
    where = _origin(prefix, layers, "integration")
    problems = [*_unused_marker(prefix, layers, stage, integration, continuity)]
    if continuity.mode != ContinuityMode.CHECKPOINTED.value:
        problems.append(
            Problem(
                where,
                f"needs checkpointed continuity, but stage '{stage}' resolves to "
                f"'{continuity.mode}'",
                integration.value,
                True,
            )
        )
    if not set(continuity.checkpoint_paths) & set(_STATE_SELECTIONS):
        problems.append(
            Problem(
                where,
                f"needs the state folder saved: add 'state' (or '.') to stage '{stage}''s "
                f"checkpoint_paths {list(continuity.checkpoint_paths)}",
                integration.value,
                True,
            )
        )
    return problems


def _unused_marker(
    prefix: str,
    layers: Sequence[_StageFields],
    stage: str,
    integration: Integration,
    continuity: ResolvedContinuity,
) -> list[Problem]:
    """``checkpoint_complete``, ``checkpoint_name``, ``step_key`` and ``resume_args`` guide
    captures and resumes of folders a program writes itself; under ``hf-trainer-v1`` the
    integration publishes every folder whole at the Trainer's step and resumes the Trainer.
    ``auto`` may leave a program unprepared, and then the first three count; ``resume_args``
    would reach a prepared Trainer program too, which the integration resumes itself, so it is
    refused under both. ``metrics``, like the first three: the integration records the
    Trainer's metrics itself."""
    problems = []
    for key in ("checkpoint_complete", "checkpoint_name", "step_key", "resume_args", "metrics"):
        value = getattr(continuity, key)
        if not value or (key != "resume_args" and integration is not Integration.HF_TRAINER_V1):
            continue
        written = next(
            layer
            for layer in layers
            if layer.continuity is not None
            and layer.given("continuity")
            and layer.continuity.given(key)
        )
        does = (
            "records the Trainer's logged metrics itself"
            if key == "metrics"
            else "publishes each checkpoint whole and resumes the Trainer itself"
        )
        problems.append(
            Problem(
                _path_in(prefix, layers, written, f"continuity.{key}"),
                f"has no effect in stage '{stage}': integration '{integration.value}' "
                f"{does}; remove it, or set it only in stages that write and load their own "
                "checkpoints",
                value if isinstance(value, str) else list(value),
                True,
            )
        )
    return problems


def overridden_stage(stage: Mapping[str, Any], overrides: Overrides) -> dict[str, Any]:
    """A stored resolved stage (``ResolvedStage`` as a dict) with ``overrides``' ``env``,
    ``outputs`` and ``execution`` applied by the precedence above: the command line wins, a
    variable or an ``[execution]`` key at a time. ``nodus runs branch --set`` uses it on the
    parent's resolution (:func:`nodus.schemas.continuation.apply_changes`)."""
    result = dict(stage)
    if overrides.given("env"):
        result["env"] = {**stage["env"], **(overrides.env or {})}
    if overrides.given("outputs"):
        result["outputs"] = [normal_path(path) for path in overrides.outputs or ()]
    table = overrides.execution
    if table is not None and overrides.given("execution"):
        given = {name: getattr(table, name) for name in table.model_fields_set}
        result["execution"] = {**stage["execution"], **given}
        result["execution"]["grace_period"] = float(result["execution"]["grace_period"])
    return result
