"""The training step a directory-contract program's own names carry.

A selection without ``checkpoint-<step>`` folders is captured whole each time it settles, and
its snapshot needs a step: the one its names carry where they carry one (Accelerate's
``step_N`` and automatic ``checkpoint_N``, Lightning's ``epoch=E-step=S.ckpt``, DeepSpeed's
``global_stepN``, Megatron's ``iter_N``), the highest of them; ``[continuity] checkpoint_name``
names a program's own pattern (``"model_{step}.pt"``) and then alone decides. The name that
carries the step may carry the epoch too (Lightning's ``epoch=E``, a template's ``{epoch}``). A
selection whose names carry none (a single ``ckpt.pt``) asks the checkpoint itself
(:mod:`nodus.stages.recorded_steps`), else takes the capture's count: never a misleading 0.

Every function is pure over relative ``/``-separated paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nodus.protocol import PLACEHOLDER, checkpoint_folder

__all__ = ["KNOWN_NAMES", "StepName", "pattern", "step_of"]

KNOWN_NAMES = ", ".join(
    (
        checkpoint_folder(0)[:-1] + "N",
        "checkpoint_N",
        "ckpt_N",
        "step_N",
        "stepN",
        "global_stepN",
        "epoch=E-step=S",
        "iter_N",
        "iteration_N",
    )
)
"""The names that carry a step without a ``checkpoint_name``, in words (validate, docs)."""

# One name part: the word at the name's start or after `-`, `=` or `.` (never after `_`:
# Accelerate's `custom_checkpoint_1.pkl` names an object, not a step), an optional separator,
# the number, then the part's end or a separator (`step_20`, `epoch=0-step=20.ckpt`,
# `global_step100`, `iter_0000100`).
_KNOWN = re.compile(
    r"(?:^|(?<=[-=.]))(?:checkpoint|ckpt|global_step|step|iteration|iter)[-_=]?"
    r"(?P<step>\d+)(?=$|[^0-9A-Za-z])",
    re.IGNORECASE,
)
# The epoch beside a known step name: Lightning's `epoch=3-step=400.ckpt`.
_EPOCH = re.compile(r"(?:^|(?<=[-=._]))epoch[-_=]?(?P<epoch>\d+)(?=$|[^0-9A-Za-z])", re.I)
_PLACEHOLDER = re.compile(PLACEHOLDER)
# The placeholders of protocol.STEP_NAME_FIELDS (checked there when a workload is read).
_FIELDS = {"step": r"(?P<step>\d+)", "epoch": r"(?P<epoch>\d+)"}


class StepName:
    """Where a selection's newest step is written: the step, the path that carries it, and
    the epoch that name carries (None where it carries none)."""

    __slots__ = ("epoch", "path", "step")

    def __init__(self, step: int, path: str, epoch: int | None = None) -> None:
        self.step = step
        self.path = path  # relative, up to and including the name that carries the step
        self.epoch = epoch

    def __repr__(self) -> str:
        return f"StepName({self.step}, {self.path!r}, epoch={self.epoch})"


def pattern(template: str | None) -> re.Pattern[str]:
    """The expression one name is matched with: ``search`` for the known names, ``fullmatch``
    for a template."""
    if template is None:
        return _KNOWN
    parts, at, named = [], 0, set()
    for found in _PLACEHOLDER.finditer(template):
        field = found.group(1)  # a second {epoch} is matched, not named twice
        parts += [re.escape(template[at : found.start()])]
        parts += [_FIELDS[field] if field not in named else r"\d+"]
        named.add(field)
        at = found.end()
    parts.append(re.escape(template[at:]))
    return re.compile("".join(parts))


def step_of(paths: Iterable[str], template: str | None = None) -> StepName | None:
    """The highest step any part of ``paths`` carries (the shortest path on a tie); None
    when no name carries one."""
    expression = pattern(template)
    best: StepName | None = None
    seen: set[str] = set()
    for path in paths:
        parts = path.split("/")
        for depth, part in enumerate(parts, start=1):
            prefix = "/".join(parts[:depth])
            if prefix in seen:
                continue
            seen.add(prefix)
            step, epoch = _step(expression, part, template is not None)
            if step is None:
                continue
            if best is None or (step, -len(prefix)) > (best.step, -len(best.path)):
                best = StepName(step, prefix, epoch)
    return best


def _step(expression: re.Pattern[str], name: str, whole: bool) -> tuple[int | None, int | None]:
    """The step ``name`` carries and the epoch beside it."""
    if whole:
        found = expression.fullmatch(name)
        if found is None:
            return None, None
        epoch = found.groupdict().get("epoch")
        return int(found.group("step")), None if epoch is None else int(epoch)
    steps = [int(found.group("step")) for found in expression.finditer(name)]
    if not steps:
        return None, None
    epoch_found = _EPOCH.search(name)
    return max(steps), None if epoch_found is None else int(epoch_found.group("epoch"))
