"""What a snapshot is: the manifest written last, as one object, to commit it.

A manifest never changes once written. Deleting a kind writes a tombstone next to it instead;
:class:`Manifest` carries the kinds whose deletion has begun (``deleting``) so its totals and
held kinds leave them out, as users expect from ``nodus runs snapshots``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nodus.store.kinds import KINDS

__all__ = ["FORMAT", "FileEntry", "Manifest", "SnapshotInfo"]

FORMAT = 1
"""Manifest format version; readers refuse a newer one rather than misread it."""


@dataclass(frozen=True)
class SnapshotInfo:
    """Who a capture belongs to and what the program reported at its step."""

    run: str
    stage: str | None
    attempt: int
    step: int | None
    epoch: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    role: str = "checkpoint"  # "checkpoint" | "source" | "outputs"


@dataclass(frozen=True)
class FileEntry:
    """One captured file (or symlink pointing inside the selection)."""

    path: str  # relative, "/"-separated
    size: int
    mode: int  # permission bits only
    hash: str  # xxh3-128 hex of the contents; "" for a symlink
    kind: str  # see nodus.store.kinds
    target: str | None = None  # symlink target, relative to the link's folder
    mtime_ns: int | None = None  # modification time as captured; None in older manifests

    @property
    def is_link(self) -> bool:
        return self.target is not None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "mode": self.mode,
            "hash": self.hash,
            "kind": self.kind,
        }
        if self.target is not None:
            data["target"] = self.target
        if self.mtime_ns is not None:
            data["mtime_ns"] = self.mtime_ns
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileEntry:
        return cls(
            path=str(data["path"]),
            size=int(data["size"]),
            mode=int(data["mode"]),
            hash=str(data["hash"]),
            kind=str(data["kind"]),
            target=data.get("target"),
            mtime_ns=None if data.get("mtime_ns") is None else int(data["mtime_ns"]),
        )


@dataclass(frozen=True)
class Manifest:
    """A committed snapshot, as read back from the store (with its tombstones applied)."""

    id: str
    run: str
    stage: str | None
    attempt: int
    step: int | None
    epoch: float | None
    metrics: dict[str, Any]
    role: str
    created: float  # seconds since the epoch (UTC), when the manifest was written
    files: tuple[FileEntry, ...]
    deleting: frozenset[str] = frozenset()  # kinds whose deletion has begun

    @property
    def kinds(self) -> tuple[str, ...]:
        """Kinds this snapshot still holds, in :data:`KINDS` order."""
        present = {entry.kind for entry in self.files} - self.deleting
        return tuple(kind for kind in KINDS if kind in present)

    @property
    def stored_kinds(self) -> tuple[str, ...]:
        """Kinds the snapshot was committed with, deleted since or not, in :data:`KINDS` order."""
        present = {entry.kind for entry in self.files}
        return tuple(kind for kind in KINDS if kind in present)

    @property
    def emptied(self) -> bool:
        """Every kind it was committed with is being deleted: the snapshot is going away."""
        return bool(self.stored_kinds) and not self.kinds

    @property
    def bytes_by_kind(self) -> dict[str, int]:
        """Bytes per held kind; a kind whose deletion has begun is left out."""
        totals = {kind: 0 for kind in self.kinds}
        for entry in self.held_files():
            totals[entry.kind] += entry.size
        return totals

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_kind.values())

    def held_files(self, kinds: tuple[str, ...] | None = None) -> list[FileEntry]:
        """Entries of the held kinds (optionally only of ``kinds``)."""
        wanted = set(self.kinds if kinds is None else kinds) - self.deleting
        return [entry for entry in self.files if entry.kind in wanted]

    def sort_key(self) -> tuple[int, float]:
        # Oldest first by step, then commit time; stepless snapshots (sources) come first.
        return (-1 if self.step is None else self.step, self.created)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``--json`` output (and of the stored manifest plus ``deleting``)."""
        data = self.stored_dict()
        data["kinds"] = list(self.kinds)
        data["bytes_by_kind"] = self.bytes_by_kind
        data["deleting"] = sorted(self.deleting)
        return data

    def stored_dict(self) -> dict[str, Any]:
        """Exactly what the commit writes: totals as of the commit, no tombstones."""
        at_commit = {kind: 0 for kind in KINDS if any(e.kind == kind for e in self.files)}
        for entry in self.files:
            at_commit[entry.kind] += entry.size
        return {
            "format": FORMAT,
            "id": self.id,
            "run": self.run,
            "stage": self.stage,
            "attempt": self.attempt,
            "step": self.step,
            "epoch": self.epoch,
            "metrics": self.metrics,
            "role": self.role,
            "created": self.created,
            "bytes_by_kind": at_commit,
            "files": [entry.to_dict() for entry in self.files],
        }

    def to_json(self) -> bytes:
        return json.dumps(self.stored_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any], deleting: frozenset[str] = frozenset()) -> Manifest:
        if int(data.get("format", 0)) > FORMAT:
            raise ValueError(f"manifest format {data['format']} is newer than this nodus reads")
        return cls(
            id=str(data["id"]),
            run=str(data["run"]),
            stage=data.get("stage"),
            attempt=int(data["attempt"]),
            step=data.get("step"),
            epoch=data.get("epoch"),
            metrics=dict(data.get("metrics") or {}),
            role=str(data.get("role", "checkpoint")),
            created=float(data["created"]),
            files=tuple(FileEntry.from_dict(item) for item in data["files"]),
            deleting=deleting,
        )

    @classmethod
    def from_json(cls, raw: bytes, deleting: frozenset[str] = frozenset()) -> Manifest:
        return cls.from_dict(json.loads(raw), deleting)
