"""Which snapshots a new attempt may restore, and which of a stage's snapshots is the newest.

Pure functions over committed manifests: the runner picks restore targets with them, and
retention (:mod:`nodus.retention`) ranks snapshots by the same order, so "newest" means one
thing everywhere.

A snapshot can continue training only while it holds its training state: retention may have
deleted the ``state`` kind and kept the weights, and such a snapshot would restart the optimizer
from nothing. A directory-contract program lays its folder out its own way (kind ``files``):
that is its training state, and its snapshot is restorable while it holds it, unless part of
the folder carried a ``state`` name and that kind is gone.

Among restorable snapshots the latest attempt's count as the newest (docs/cli.md): after
``runs resume --step 10`` the new attempt's step 20 is newer than the old attempt's step 30.
Within one attempt a step captured again (the program rewrote its folder) is newer than the
earlier capture of that step and supersedes it: restores take it first and listings show only it.

Nothing here needs to ask whether a snapshot's checkpoint folder is whole: a folder still being
written is never committed (:mod:`nodus.runner.capture.capturer`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodus.errors import NotFoundError
from nodus.store.kinds import KIND_FILES, KIND_STATE


def holds_training_state(manifest: Any) -> bool:
    """True while ``manifest`` can continue training (see the module docstring)."""
    if KIND_STATE in manifest.kinds:
        return True
    had_state = any(entry.kind == KIND_STATE for entry in manifest.files)
    return not had_state and KIND_FILES in manifest.kinds


def by_recency(manifests: Iterable[Any]) -> list[Any]:
    """Every snapshot, newest first: latest attempt, then highest step, then latest commit."""
    return sorted(manifests, key=lambda m: (m.attempt, m.step or 0, m.created), reverse=True)


def newest_first(manifests: Iterable[Any]) -> list[Any]:
    """Restorable snapshots, newest first (the order of :func:`by_recency`)."""
    return by_recency(m for m in manifests if holds_training_state(m))


def current(manifests: Iterable[Any]) -> list[Any]:
    """``manifests`` less the captures superseded by a newer one of the same attempt and step."""
    manifests = list(manifests)
    newest: dict[tuple[Any, ...], Any] = {}
    for manifest in manifests:
        key = (manifest.run, manifest.stage, manifest.attempt, manifest.step)
        if key not in newest or manifest.created > newest[key].created:
            newest[key] = manifest
    return [m for m in manifests if newest[(m.run, m.stage, m.attempt, m.step)] is m]


def at_step(manifests: Iterable[Any], step: int) -> list[Any]:
    """Restorable snapshots at ``step``, the latest attempt's first."""
    return [m for m in newest_first(manifests) if m.step == step]


def check_step(run_id: str, stage: str, manifests: list[Any], step: int) -> None:
    """``--step N`` must name a snapshot that still holds training state, else say which do."""
    if at_step(manifests, step):
        return
    usable = sorted({m.step for m in newest_first(manifests)})
    shown = ", ".join(map(str, usable)) or "none"
    without = (
        " (its snapshot no longer holds training state)"
        if any(m.step == step for m in manifests)
        else ""
    )
    raise NotFoundError(
        f"{run_id} has no committed snapshot at step {step} of stage {stage!r}"
        f"{without}; committed steps: {shown}"
    )
