"""The next attempt's working copy, laid out while this attempt trains.

A recovery lays the copy out again between the kill and the program's start: the run's source,
the earlier stages' outputs and the private folders, then the restored checkpoint. All but the
checkpoint is the same for every attempt of a stage, so once an attempt's program has settled,
its runner lays that part out beside the copy (``<stage>/next/``, :class:`Workspace`), and the
next attempt of the same drive takes it with one rename: on a recovery's path only the
checkpoint is restored.

Only what this runner laid out in this drive is taken (:class:`Ahead` says what ``next/``
holds); a ``next/`` left by a runner that died is laid out again or removed, never trusted.
A source and outputs together larger than ``defaults.LAY_AHEAD_MAX_BYTES`` are not laid out
twice (their disk would be doubled): such a recovery restores them as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nodus.errors import NodusError
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults

if TYPE_CHECKING:
    from nodus.store import SnapshotStore


@dataclass(frozen=True)
class Ahead:
    """What a stage's ``next/`` holds: its source with its earlier stages' outputs over it."""

    stage: str
    source: str  # the source snapshot's id
    overlays: tuple[str, ...]  # the outputs' snapshot ids, laid over the source in this order


def lay_source(store: SnapshotStore, target: str, source: str, overlays: Sequence[str]) -> None:
    """The source restored into the empty folder ``target``, the outputs laid over it."""
    store.restore(source, target)
    for snapshot in overlays:
        store.restore(snapshot, target, overlay=True)


def lay_ahead(store: SnapshotStore, ws: Workspace, ahead: Ahead) -> bool:
    """Lay ``ahead`` out in ``ws.next`` with the copy's folders; False when nothing was laid
    out (too large to hold twice, or the store failed: the recovery restores it instead)."""
    ws.discard_next()
    try:
        snapshots = [store.get(snapshot) for snapshot in (ahead.source, *ahead.overlays)]
        size = sum(entry.size for manifest in snapshots for entry in manifest.held_files())
        if size > defaults.LAY_AHEAD_MAX_BYTES:
            return False
        lay_source(store, ws.next, ahead.source, ahead.overlays)
        ws.make_next_folders()
    except (NodusError, OSError):  # damaged, gone or unreachable, a full disk: not ahead
        ws.discard_next()
        return False
    return True
