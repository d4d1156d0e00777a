"""A run put in a phase for a test the way nodus moves it: change by change, each one its
lifecycle allows (:mod:`nodus.runner.catalog.lifecycle`), along the shortest way there."""

from __future__ import annotations

from collections import deque
from typing import Any

from nodus.runner.catalog.lifecycle import TRANSITIONS
from nodus.runner.catalog.phases import Phase


def way(source: Phase, target: Phase) -> list[Phase]:
    """The phases a run in ``source`` passes through to reach ``target`` (``target`` last;
    none when it is there)."""
    if source == target:
        return []
    came_from: dict[Phase, Phase | None] = {source: None}
    queue = deque([source])
    while queue:
        phase = queue.popleft()
        if phase == target:
            break
        for before, after in sorted(TRANSITIONS):
            if before == phase and after not in came_from:
                came_from[after] = phase
                queue.append(after)
    if target not in came_from:
        raise AssertionError(f"no way from {source} to {target} in the lifecycle")
    steps = [target]
    while (previous := came_from[steps[-1]]) != source:
        assert previous is not None
        steps.append(previous)
    return steps[::-1]


def move_to(catalog: Any, run_id: str, phase: Phase, **details: Any) -> None:
    """Move the run to ``phase`` through the lifecycle (``details``: ``stage``, ``message``)."""
    for step in way(catalog.get_run(run_id).phase, phase):
        catalog.lifecycle.move(run_id, step, **details)
