"""What holds a snapshot: pins, epoch holds, the resume target, the run's model and branches.

Holds protect artifact kinds of a snapshot from retention (docs/cli.md); this module is the one
place that decides what a hold means, for rotation, expiry, ``nodus gc`` and the listings
alike. Two are stored, as small records the snapshot's own store keeps next to its manifest
(``store.hold_records``), so they travel with the store (a shared S3 store protects a pinned
snapshot whichever machine runs retention)::

    pin              {"kinds": [...], "at": ..., "by": "user@host"}
    epoch-released   {"at": ..., "by": ...}   (the epoch hold is dropped)

The others are derived, never stored, so they cannot go stale:

- ``epoch``: the snapshot is an epoch-end save (a whole-number epoch) of a stage with
  ``save_each_epoch``; it holds the weights until ``nodus snapshots release`` drops it.
- ``resume_target``: the newest snapshot of the stage a retry or resume of the unfinished run
  would restore; it holds everything a restore lays down.
- ``model``: the run's own model, the last stage's newest save holding weights once the run
  succeeded; it holds the weights until the run is deleted.
- ``branch``: an unfinished run started from this snapshot (``resume_from`` or ``nodus runs
  branch``): every kind for ``full-state``, all but the training state for ``weights``.

Retention asks :func:`run_holds` for every hold of a run's checkpoints and deletes no kind a
hold names (:func:`protected_kinds`).
"""

from __future__ import annotations

import getpass
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, UsageError
from nodus.protocol import MODE_WEIGHTS
from nodus.store.kinds import KIND_WEIGHTS
from nodus.store.restorable import by_recency, newest_first

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore

__all__ = [
    "Branches",
    "Hold",
    "HoldIndex",
    "check_release",
    "holds_of",
    "is_epoch_save",
    "pin",
    "protected_kinds",
    "release",
    "resume_target",
    "run_holds",
    "run_model",
]

PIN = "pin"
EPOCH_RELEASED = "epoch-released"

Branches = Mapping[Any, tuple[tuple[str, str], ...]]
"""Runs started from a snapshot: {snapshot id or step: ((run id, mode), ...)}."""


@dataclass(frozen=True)
class Hold:
    """One reason a snapshot's kinds are kept."""

    type: str  # "pin" | "epoch" | "resume_target" | "model" | "branch"
    kinds: tuple[str, ...]
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "kinds": list(self.kinds), "detail": self.detail}


class HoldIndex:
    """Every stored hold of one store, read with a single listing (listings stay cheap)."""

    def __init__(self, store: SnapshotStore) -> None:
        self._records = store.hold_records
        self._names = self._records.names()

    def has(self, snapshot_id: str, name: str) -> bool:
        return name in self._names.get(snapshot_id, ())

    def read(self, snapshot_id: str, name: str) -> dict[str, Any]:
        return self._records.read(snapshot_id, name) or {}


# --- stored holds: pin and release --------------------------------------------------------------


def pin(store: SnapshotStore, manifest: Manifest) -> bool:
    """Pin every kind the snapshot holds now; False if it was pinned already."""
    if manifest.role != "checkpoint":
        raise UsageError(
            f"{manifest.id} is a run's {manifest.role} snapshot: only checkpoints "
            "are pinned (retention never deletes sources or outputs)"
        )
    if not manifest.kinds:
        raise NotFoundError(f"{manifest.id} holds no artifact kinds any more; nothing to pin")
    if store.hold_records.exists(manifest.id, PIN):
        return False
    _write(store, manifest.id, PIN, {"kinds": list(manifest.kinds)})
    return True


def check_release(manifest: Manifest, run: Any | None) -> None:
    """An epoch hold is released only once the run has stopped (docs/cli.md):
    until then its epochs are still being registered and trained on."""
    if run is not None and is_epoch_save(manifest, run) and not run.phase.stopped:
        raise UsageError(
            f"{manifest.id} is the epoch {manifest.epoch:g} save of {run.id}, which is "
            f"{run.phase.value}: its epoch hold is released once the run has finished "
            "(or is paused)"
        )


def release(store: SnapshotStore, manifest: Manifest, epoch_save: bool) -> list[str]:
    """Drop the pin and (for an epoch save) the epoch hold; the names of the holds dropped."""
    records = store.hold_records
    dropped = []
    if records.exists(manifest.id, PIN):
        records.delete(manifest.id, PIN)
        dropped.append(PIN)
    if epoch_save and not records.exists(manifest.id, EPOCH_RELEASED):
        _write(store, manifest.id, EPOCH_RELEASED, {})
        dropped.append("epoch")
    return dropped


def _write(store: SnapshotStore, snapshot_id: str, name: str, data: dict[str, Any]) -> None:
    record = {**data, "at": time.time(), "by": f"{_user()}@{socket.gethostname()}"}
    store.hold_records.write(snapshot_id, name, record)


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a container user with no passwd entry and no $USER
        return "unknown"


# --- every hold of a run's snapshots -------------------------------------------------------------


def run_holds(
    run: Any | None, manifests: list[Any], index: HoldIndex, branches: Branches
) -> dict[str, list[Hold]]:
    """Every hold on each of ``manifests``, the committed checkpoints of ``run``.

    ``run`` is the catalog's run (``.id``, ``.phase``, ``.stages``, ``.workload``; None for a
    snapshot of a run this catalog never saw: only its stored holds count then). ``branches``
    are the unfinished runs started from these snapshots, as the runner's catalog scan finds
    them (``nodus.runner.upkeep.lineage.referencing_runs``).
    """
    target = resume_target(run, manifests)
    model = run_model(run, manifests)
    return {
        m.id: holds_of(
            m,
            run,
            index,
            resume_target_id=target,
            model_id=model,
            branches=tuple(branches.get(m.id, ())) + tuple(branches.get(m.step, ())),
        )
        for m in manifests
    }


def holds_of(
    manifest: Any,
    run: Any | None,
    index: HoldIndex,
    *,
    resume_target_id: str | None = None,
    model_id: str | None = None,
    branches: Iterable[tuple[str, str]] = (),
) -> list[Hold]:
    """The holds on ``manifest``; ``branches`` are (run id, mode) of runs branched from it."""
    holds = []
    if index.has(manifest.id, PIN):
        record = index.read(manifest.id, PIN)
        kinds = tuple(record.get("kinds") or manifest.kinds)
        holds.append(Hold("pin", kinds, f"pinned by {record.get('by', '?')}"))
    if is_epoch_save(manifest, run) and not index.has(manifest.id, EPOCH_RELEASED):
        holds.append(
            Hold("epoch", (KIND_WEIGHTS,), f"weights of the epoch {manifest.epoch:g} save")
        )
    if resume_target_id == manifest.id:
        holds.append(
            Hold("resume_target", manifest.kinds, f"a resume of {manifest.run} would restore it")
        )
    if model_id == manifest.id:
        holds.append(Hold("model", (KIND_WEIGHTS,), f"the model of {manifest.run}"))
    for brancher, mode in branches:
        kinds = _branch_kinds(manifest, mode)
        holds.append(Hold("branch", kinds, f"{brancher} started from it"))
    return holds


def _branch_kinds(manifest: Any, mode: str) -> tuple[str, ...]:
    """What a run started from ``manifest`` needs: everything for a full-state start; for a
    warm start the weights, or a directory-contract program's own ``files`` (its weights)."""
    if mode != MODE_WEIGHTS:
        return tuple(manifest.kinds)
    if any(entry.kind == KIND_WEIGHTS for entry in manifest.files):
        return (KIND_WEIGHTS,)
    return tuple(manifest.kinds)


def protected_kinds(holds: Iterable[Hold]) -> set[str]:
    """Kinds retention must keep."""
    return {kind for hold in holds for kind in hold.kinds}


def is_epoch_save(manifest: Any, run: Any | None) -> bool:
    """An epoch-end save of a stage with ``save_each_epoch`` (its epoch is a whole number)."""
    if run is None or manifest.epoch is None or manifest.role != "checkpoint":
        return False
    if float(manifest.epoch) != int(manifest.epoch) or manifest.epoch <= 0:
        return False
    for stage in run.workload.get("stages", ()):
        if stage.get("name") == manifest.stage:
            return bool(stage.get("execution", {}).get("save_each_epoch"))
    return False


def resume_target(run: Any | None, manifests: list[Any]) -> str | None:
    """The snapshot a retry or resume of ``run`` would restore, chosen as the runner chooses.

    ``manifests`` are the run's committed checkpoints; the runner's own rule
    (:func:`nodus.store.restorable.newest_first`) decides which of the current stage's is
    newest.
    """
    if run is None or run.phase.final:  # never retried or resumed again
        return None
    current = next((s["name"] for s in run.stages if s["phase"] != "SUCCEEDED"), None)
    candidates = newest_first(m for m in manifests if m.stage == current)
    return candidates[0].id if candidates else None


def run_model(run: Any | None, manifests: list[Any]) -> str | None:
    """The run's own model, once it succeeded: the newest save with weights of the last stage
    that saved any. A stage after it that saves no weights (a managed method's ``export``, an
    evaluation) does not take the model away from the stage that trained it."""
    if run is None or run.phase != "SUCCEEDED" or not run.stages:
        return None
    for stage in reversed(run.stages):
        weights = by_recency(
            m for m in manifests if m.stage == stage["name"] and KIND_WEIGHTS in m.kinds
        )
        if weights:
            return weights[0].id
    return None
