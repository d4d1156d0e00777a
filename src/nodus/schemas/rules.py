"""Rules that span several fields of a workload as written (before inheritance applies).

Single-field rules live on the field types (:mod:`nodus.schemas.fields`); rules that need the
resolved values live in :mod:`nodus.schemas.resolve`. Each check returns problems instead of
raising, so a file's problems are all reported together.
"""

from __future__ import annotations

from nodus.errors import Problem
from nodus.schemas.models import Framework, Workload

NOT_SUPPORTED_YET = (
    "framework shortcuts are not supported yet; write the stages explicitly with [[stages]] "
    "and a command for now"
)


def check_workload(workload: Workload) -> list[Problem]:
    return [
        *_unique_stage_names(workload),
        *_shortcut(workload),
    ]


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


def _shortcut(workload: Workload) -> list[Problem]:
    """A framework shortcut and its [method] table go together, and generate the stages."""
    if not workload.given("framework"):
        if workload.given("method"):
            return [Problem("method", "a [method] table needs framework = 'sft', 'dpo' or 'grpo'")]
        return []
    problems = [*_method_problems(workload)]
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
    problems.append(Problem("framework", NOT_SUPPORTED_YET, workload.framework.value, True))
    return problems


def _method_problems(workload: Workload) -> list[Problem]:
    method = workload.method
    if method is None:
        framework = workload.framework.value
        return [Problem("method", f"framework = '{framework}' needs a [method] table")]
    problems = []
    if method.given("max_steps") == method.given("num_epochs"):
        problems.append(Problem("method", "give exactly one of max_steps and num_epochs"))
    grpo = workload.framework is Framework.GRPO
    if grpo and not method.reward_functions:
        problems.append(
            Problem("method.reward_functions", "grpo needs at least one 'module:function'")
        )
    if not grpo and method.given("reward_functions"):
        problems.append(
            Problem("method.reward_functions", "reward functions are used by grpo only")
        )
    return problems
