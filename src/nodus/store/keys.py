"""Snapshot ids and store keys, each built by one function.

Capture, list, restore, check, deletion and GC all call these, so the layout below is the
whole truth about where things live in a store (relative to its root URL)::

    blobs/<h[:2]>/<h>            file contents, named by their xxh3-128 (32 hex digits)
    snapshots/<id>.json          a manifest; writing it is the commit
    tombstones/<id>.<kind>       deletion of one kind of a snapshot has begun
    intents/<id>.json            a capture is running (blob GC leaves its blobs alone)
    locks/sweep.json             a blob sweep is running (captures wait for it)
    quarantine/<id>.json         a damaged manifest set aside by ``nodus store verify --repair``
    tmp/                         temporary names of blobs and manifests being written (file://)
"""

from __future__ import annotations

import re
import secrets

__all__ = [
    "BLOBS",
    "SNAPSHOTS",
    "blob_key",
    "hash_of_blob_key",
    "intent_key",
    "is_snapshot_id",
    "manifest_key",
    "new_snapshot_id",
    "quarantine_key",
    "snapshot_id_of_key",
    "sweep_key",
    "tombstone_key",
]

BLOBS = "blobs"
SNAPSHOTS = "snapshots"
TOMBSTONES = "tombstones"
INTENTS = "intents"
QUARANTINE = "quarantine"
TMP = "tmp"

# A run's source and final outputs live in the same store as its checkpoints; the prefix tells
# them apart at a glance in logs and on the command line.
_PREFIX = {"checkpoint": "ckpt", "source": "src", "outputs": "out"}
_ID = re.compile(r"^(ckpt|src|out)_[0-9a-f]{16}$")
_HASH = re.compile(r"^[0-9a-f]{32}$")


def new_snapshot_id(role: str = "checkpoint") -> str:
    """A fresh id such as ``ckpt_1f3a…``; random, so concurrent attempts never collide."""
    return f"{_PREFIX[role]}_{secrets.token_hex(8)}"


def is_snapshot_id(text: str) -> bool:
    return bool(_ID.match(text))


def blob_key(digest: str) -> str:
    # Two hex digits of fan-out keep directory listings short on file:// stores.
    return f"{BLOBS}/{digest[:2]}/{digest}"


def hash_of_blob_key(key: str) -> str | None:
    """The digest a blob key names, or None for anything else under ``blobs/``."""
    name = key.rsplit("/", 1)[-1]
    return name if _HASH.match(name) and key.endswith(f"{name[:2]}/{name}") else None


def manifest_key(snapshot_id: str) -> str:
    return f"{SNAPSHOTS}/{snapshot_id}.json"


def snapshot_id_of_key(key: str) -> str | None:
    """The snapshot id a manifest (or quarantine) key names, or None for anything else."""
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".json"):
        return None
    snapshot_id = name[: -len(".json")]
    return snapshot_id if is_snapshot_id(snapshot_id) else None


def tombstone_key(snapshot_id: str, kind: str) -> str:
    return f"{TOMBSTONES}/{snapshot_id}.{kind}"


def intent_key(snapshot_id: str) -> str:
    return f"{INTENTS}/{snapshot_id}.json"


def sweep_key() -> str:
    return "locks/sweep.json"


def quarantine_key(snapshot_id: str) -> str:
    return f"{QUARANTINE}/{snapshot_id}.json"
