"""What a snapshot is: the manifest written last, as one object, to commit it.

A manifest never changes once written. Deleting a kind writes a tombstone next to it instead;
:class:`Manifest` carries the kinds whose deletion has begun (``deleting``) so its totals and
held kinds leave them out, as users expect from ``nodus runs snapshots``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nodus.store import fields
from nodus.store.keys import is_snapshot_id
from nodus.store.kinds import KINDS
from nodus.store.names import escaping_link, link_problem, path_problem

__all__ = [
    "COUNTED",
    "FORMAT",
    "PERMISSIONS",
    "ROLES",
    "STEP_SOURCES",
    "FileEntry",
    "Manifest",
    "SnapshotInfo",
    "step_label",
]

FORMAT = 1
"""Manifest format version; readers refuse a newer one rather than misread it."""

ROLES = ("checkpoint", "source", "outputs")
PERMISSIONS = 0o777
"""The mode bits a snapshot keeps: never setuid, setgid or sticky, whatever a file had."""
COUNTED = "capture"
"""The step source of a snapshot numbered by its capture's count: no name and nothing inside
the checkpoint recorded the program's step, so its "step" is said as ``capture N``."""
STEP_SOURCES = ("name", "checkpoint", COUNTED)
"""Where a whole selection's step came from (:mod:`nodus.runner.capture.capturer`): a name in
it, a step recorded inside its checkpoint, or the capture's count. Absent (None) where the
step is the program's by construction (a save record, a ``checkpoint-<step>`` folder) and in
manifests written before it was recorded."""


def step_label(step: int | None, counted: bool) -> str:
    """How a snapshot's step is said: ``step 40``, or ``capture 3`` for a counted one."""
    return f"{COUNTED if counted else 'step'} {'-' if step is None else step}"


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
    step_source: str | None = None  # one of STEP_SOURCES, or None


@dataclass(frozen=True)
class FileEntry:
    """One captured file (or symlink pointing inside the selection)."""

    path: str  # relative, "/"-separated
    size: int
    mode: int  # permission bits only (PERMISSIONS)
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
    def from_dict(cls, data: Any, where: str = "file") -> FileEntry:
        """The entry ``data`` describes, every field checked (``Damage`` names the one that
        is not what a capture writes). The mode keeps permission bits only."""
        data = fields.mapping(data, where)
        path = fields.text(data, "path", where)
        problem = path_problem(path)
        target = fields.text(data, "target", where, optional=True)
        if problem is None and target is not None:
            problem = link_problem(path, target)
        if problem is not None:
            raise fields.Damage(f"{where}: path {path!r} {problem}")
        digest = fields.text(data, "hash", where)
        if target is None and not fields.HASH.fullmatch(digest):
            raise fields.Damage(f"{where}.hash is {digest[:60]!r}, not 32 hex digits")
        kind = fields.text(data, "kind", where)
        if kind not in KINDS:
            raise fields.Damage(f"{where}.kind is {kind[:60]!r}, not one of {', '.join(KINDS)}")
        return cls(
            path=path,
            size=fields.integer(data, "size", where, minimum=0),
            mode=fields.integer(data, "mode", where, minimum=0, maximum=0o7777) & PERMISSIONS,
            hash="" if target is not None else digest,
            kind=kind,
            target=target,
            mtime_ns=fields.integer(data, "mtime_ns", where, optional=True),
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
    step_source: str | None = None  # one of STEP_SOURCES; None: the program's (or unrecorded)

    @property
    def counted(self) -> bool:
        """The step is the capture's count, not the program's (said ``capture N``)."""
        return self.step_source == COUNTED

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
        data = {
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
        if self.step_source is not None:  # older readers ignore it; older manifests lack it
            data["step_source"] = self.step_source
        return data

    def to_json(self) -> bytes:
        return json.dumps(self.stored_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_dict(cls, data: Any, deleting: frozenset[str] = frozenset()) -> Manifest:
        """The manifest ``data`` describes, every field checked: ``Damage`` (a ValueError)
        names the first field that is not what a commit writes."""
        data = fields.mapping(data, "manifest")
        if (fields.integer(data, "format", optional=True) or 0) > FORMAT:
            raise ValueError(f"manifest format {data['format']} is newer than this nodus reads")
        snapshot_id = fields.text(data, "id")
        if not is_snapshot_id(snapshot_id):
            raise fields.Damage(f"id {snapshot_id[:60]!r} is not a snapshot id")
        role = fields.text(data, "role", optional=True) or "checkpoint"
        if role not in ROLES:
            raise fields.Damage(f"role {role[:60]!r} is not one of {', '.join(ROLES)}")
        source = fields.text(data, "step_source", optional=True)
        if source is not None and source not in STEP_SOURCES:
            raise fields.Damage(
                f"step_source {source[:60]!r} is not one of {', '.join(STEP_SOURCES)}"
            )
        metrics = data.get("metrics") or {}
        if not isinstance(metrics, dict) or not all(
            isinstance(value, _SCALARS) for value in metrics.values()
        ):
            raise fields.Damage("metrics is not an object of numbers")
        files = tuple(
            FileEntry.from_dict(item, f"files[{index}]")
            for index, item in enumerate(fields.sequence(data, "files"))
        )
        if len({entry.path for entry in files}) != len(files):
            raise fields.Damage("files lists one path twice")
        escaping = escaping_link({e.path: e.target for e in files if e.target is not None})
        if escaping is not None:
            raise fields.Damage(f"the symlink {escaping!r} leads out of the snapshot (a chain)")
        return cls(
            id=snapshot_id,
            run=fields.text(data, "run"),
            stage=fields.text(data, "stage", optional=True),
            attempt=fields.integer(data, "attempt", minimum=0),
            step=fields.integer(data, "step", optional=True, minimum=0),
            epoch=fields.number(data, "epoch", optional=True, finite=False),
            metrics=dict(metrics),
            role=role,
            created=float(fields.number(data, "created")),
            files=files,
            deleting=deleting,
            step_source=source,
        )

    @classmethod
    def from_json(cls, raw: bytes, deleting: frozenset[str] = frozenset()) -> Manifest:
        """Parse a stored manifest; ValueError (``Damage`` among them) when it is not one."""
        try:
            data = json.loads(raw)
        except RecursionError:  # nesting deep enough to exhaust the parser is damage too
            raise fields.Damage("nested too deeply") from None
        return cls.from_dict(data, deleting)


_SCALARS = (int, float, str, bool, type(None))
