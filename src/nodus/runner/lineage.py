"""Which unfinished runs start from a run's snapshots: the catalog's side of ``branch`` holds.

A run whose workload says ``resume_from = "RUN@STEP"`` (or a snapshot id) needs that snapshot
until it has finished, so retention must keep it (:mod:`nodus.retention.holds`). Only the
catalog knows those runs; this scan finds them, and the runner's rotation, ``nodus gc`` and the
listings all ask it.
"""

from __future__ import annotations

from typing import Any

from nodus.errors import NotFoundError, UsageError
from nodus.runner.catalog import Catalog, Run
from nodus.schemas.snapshot_ref import parse_ref

__all__ = ["SCAN", "referencing_runs"]

SCAN = 10_000
"""Most runs (newest first) whose workloads are searched for a reference."""

FULL_STATE = "full-state"  # what a resume_from branch restores: every kind


def referencing_runs(catalog: Catalog, run: Run) -> dict[Any, tuple[tuple[str, str], ...]]:
    """Unfinished runs started from a snapshot of ``run``: {snapshot id or step: ((id, mode),)}.

    A ``RUN@STEP`` reference is keyed by its step (whichever attempt saved it), a snapshot id
    by the id: the caller matches either against each of ``run``'s snapshots.
    """
    found: dict[Any, tuple[tuple[str, str], ...]] = {}
    for other in catalog.list_runs(limit=SCAN):
        source = other.workload.get("resume_from")
        if not source or other.phase.final:
            continue
        try:
            ref = parse_ref(source)
        except UsageError:
            continue  # accepted by an older nodus; it names nothing this one can find
        if ref.snapshot_id is None and not _names(catalog, ref.run or "", run):
            continue
        key = ref.snapshot_id if ref.snapshot_id is not None else ref.step
        found[key] = found.get(key, ()) + ((other.id, FULL_STATE),)
    return found


def _names(catalog: Catalog, text: str, run: Run) -> bool:
    """Whether ``RUN`` or ``RUN/STAGE`` (RUN an id or key; a key may hold ``/``) is ``run``."""
    candidates = [text]
    if "/" in text:
        candidates.append(text.rpartition("/")[0])
    for candidate in candidates:
        try:
            return catalog.get_run(candidate).id == run.id
        except NotFoundError:
            continue
    return False
