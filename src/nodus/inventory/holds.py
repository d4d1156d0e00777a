"""What holds a snapshot: pins, epoch holds, the resume target and branches.

Holds protect artifact kinds of a snapshot from retention (SPEC §8). Two are stored, as small
records the snapshot's own store keeps next to its manifest (``store.hold_records``), so they
travel with the store (a shared S3 store protects a pinned snapshot whichever machine runs
retention)::

    pin              {"kinds": [...], "at": ..., "by": "user@host"}
    epoch-released   {"at": ..., "by": ...}   (the epoch hold is dropped)

The others are derived, never stored, so they cannot go stale:

- ``epoch``: the snapshot is an epoch-end save (a whole-number epoch) of a stage with
  ``save_each_epoch``; it holds the weights until ``nodus snapshots release`` drops it.
- ``resume_target``: the newest snapshot of the stage a retry or resume of the unfinished run
  would restore; it holds everything a restore lays down.
- ``branch``: an unfinished run whose workload says ``resume_from`` this snapshot.

Retention asks :func:`holds_of` (or :func:`protected_kinds`) and deletes no kind a hold names.
"""

from __future__ import annotations

import getpass
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore

__all__ = [
    "Hold",
    "HoldIndex",
    "holds_of",
    "pin",
    "protected_kinds",
    "release",
    "resume_target",
]

PIN = "pin"
EPOCH_RELEASED = "epoch-released"


@dataclass(frozen=True)
class Hold:
    """One reason a snapshot's kinds are kept."""

    type: str  # "pin" | "epoch" | "resume_target" | "branch"
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


# --- every hold of a snapshot -------------------------------------------------------------------


def holds_of(
    manifest: Any,
    run: Any | None,
    index: HoldIndex,
    *,
    resume_target_id: str | None = None,
    branches: Iterable[tuple[str, str]] = (),
) -> list[Hold]:
    """The holds on ``manifest``; ``branches`` are (run id, mode) of runs branched from it."""
    holds = []
    if index.has(manifest.id, PIN):
        record = index.read(manifest.id, PIN)
        kinds = tuple(record.get("kinds") or manifest.kinds)
        holds.append(Hold("pin", kinds, f"pinned by {record.get('by', '?')}"))
    if is_epoch_save(manifest, run) and not index.has(manifest.id, EPOCH_RELEASED):
        holds.append(Hold("epoch", ("weights",), f"weights of the epoch {manifest.epoch:g} save"))
    if resume_target_id == manifest.id:
        holds.append(
            Hold("resume_target", manifest.kinds, f"a resume of {manifest.run} would restore it")
        )
    for brancher, mode in branches:
        kinds = ("weights",) if mode == "weights" else manifest.kinds
        holds.append(Hold("branch", kinds, f"{brancher} started from it"))
    return holds


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
    (:func:`nodus.runner.restorable.newest_first`) decides which of the current stage's is newest.
    """
    from nodus.runner.restorable import newest_first

    if run is None or run.phase.final:  # never retried or resumed again
        return None
    current = next((s["name"] for s in run.stages if s["phase"] != "SUCCEEDED"), None)
    candidates = newest_first(m for m in manifests if m.stage == current)
    return candidates[0].id if candidates else None
