"""Saves that never reached a run's store, as the catalog's events record them.

An attempt whose uploads were still failing when its stage ended records each save left behind
as a ``snapshot_unrecorded`` event (:mod:`nodus.runner.remote.uploads`). Everything that names a
step afterwards (resume, branch, pin, ``runs show``, the run's message) reads them here, so a
save the store never received is called unrecorded rather than "no snapshot".
"""

from __future__ import annotations

from typing import Any

from nodus.runner.catalog.core import Catalog, Run

__all__ = ["UNRECORDED", "unrecorded", "unrecorded_note", "unrecorded_step"]

UNRECORDED = "snapshot_unrecorded"


def unrecorded(catalog: Catalog, run_id: str) -> list[dict[str, Any]]:
    """The run's saves that never reached its store: {stage, step, snapshot, role}, by step."""
    found = {}
    for event in catalog.events(run_id):
        if event["type"] == UNRECORDED:
            details = event["details"]
            found[details.get("snapshot")] = {
                "stage": event["stage"],
                "step": details.get("step"),
                "snapshot": details.get("snapshot"),
                "role": details.get("role"),
            }
    return sorted(found.values(), key=lambda item: (item["step"] is None, item["step"] or 0))


def unrecorded_note(saves: list[dict[str, Any]]) -> str:
    """What a run whose store was unreachable says about the saves it could not store.

    ``saves`` are manifests or :func:`unrecorded` rows."""
    steps = [_get(save, "step") for save in saves if _get(save, "role") != "outputs"]
    what = [f"step {step}" for step in steps]
    if any(_get(save, "role") == "outputs" for save in saves):
        what.append("the outputs")
    return (
        f"unrecorded (never reached the store, which stayed unreachable): {', '.join(what)}; "
        "they cannot be resumed from or downloaded"
    )


def _get(save: Any, name: str) -> Any:
    return save.get(name) if isinstance(save, dict) else getattr(save, name)


def unrecorded_step(catalog: Catalog, run: Run, step: int | None) -> str | None:
    """Why ``step`` of ``run`` cannot be started from when its save never reached the store."""
    for save in unrecorded(catalog, run.id):
        if save["step"] == step:
            return (
                f"step {step} of {run.id} is unrecorded: its save ({save['snapshot']}) never "
                f"reached the store {run.store}, which was unreachable when the stage ended; "
                "it cannot be resumed from, branched or pinned"
            )
    return None
