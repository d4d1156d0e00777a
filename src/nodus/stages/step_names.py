"""The training step a directory-contract program's own names carry.

A selection without ``checkpoint-<step>`` folders is captured whole each time it settles, and
its snapshot needs a step: the one its names carry where they carry one (Accelerate's
``step_N`` and automatic ``checkpoint_N``, Lightning's ``epoch=E-step=S.ckpt``, DeepSpeed's
``global_stepN``, Megatron's ``iter_N``), the highest of them; ``[continuity] checkpoint_name``
names a program's own pattern (``"model_{step}.pt"``) and then alone decides. A selection whose
names carry none (a single ``ckpt.pt``) takes the capture's sequence instead: never a misleading
0.

Every function is pure over relative ``/``-separated paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from nodus.protocol import PLACEHOLDER, checkpoint_folder

__all__ = ["KNOWN_NAMES", "StepName", "pattern", "step_of"]

KNOWN_NAMES = ", ".join(
    (checkpoint_folder(0)[:-1] + "N", "checkpoint_N", "ckpt_N", "step_N", "stepN")
    + ("global_stepN", "epoch=E-step=S", "iter_N", "iteration_N")
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
_PLACEHOLDER = re.compile(PLACEHOLDER)
# The placeholders of protocol.STEP_NAME_FIELDS (checked there when a workload is read).
_FIELDS = {"step": r"(?P<step>\d+)", "epoch": r"\d+"}


class StepName:
    """Where a selection's newest step is written: the step and the path that carries it."""

    __slots__ = ("path", "step")

    def __init__(self, step: int, path: str) -> None:
        self.step = step
        self.path = path  # relative, up to and including the name that carries the step

    def __repr__(self) -> str:
        return f"StepName({self.step}, {self.path!r})"


def pattern(template: str | None) -> re.Pattern[str]:
    """The expression one name is matched with: ``search`` for the known names, ``fullmatch``
    for a template."""
    if template is None:
        return _KNOWN
    parts, at = [], 0
    for found in _PLACEHOLDER.finditer(template):
        parts += [re.escape(template[at : found.start()]), _FIELDS[found.group(1)]]
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
            step = _step(expression, part, template is not None)
            if step is None:
                continue
            if best is None or (step, -len(prefix)) > (best.step, -len(best.path)):
                best = StepName(step, prefix)
    return best


def _step(expression: re.Pattern[str], name: str, whole: bool) -> int | None:
    if whole:
        found = expression.fullmatch(name)
        return int(found.group("step")) if found else None
    steps = [int(found.group("step")) for found in expression.finditer(name)]
    return max(steps) if steps else None
