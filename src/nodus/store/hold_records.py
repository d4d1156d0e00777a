"""Stored holds: small JSON records next to the snapshot they hold, in the snapshot's store.

They travel with the store (a shared S3 store protects a pinned snapshot whichever machine runs
retention). What a hold means is decided by :mod:`nodus.retention.holds`; this module only
keeps its records, under the keys :func:`nodus.store.keys.hold_key` builds.
"""

from __future__ import annotations

import json
from typing import Any

from nodus.store import keys
from nodus.store.kinds import KINDS
from nodus.store.storage import Storage

__all__ = ["HoldRecords"]


class HoldRecords:
    """The hold records of one store, by snapshot id and record name (``pin``, …)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def names(self) -> dict[str, set[str]]:
        """Every stored record's name, by snapshot id, from a single listing (stays cheap)."""
        listed = (info.key for info in self._storage.list(keys.HOLDS))
        return keys.names_by_snapshot(listed, keys.hold_of_key)

    def exists(self, snapshot_id: str, name: str) -> bool:
        return self._storage.exists(keys.hold_key(snapshot_id, name))

    def read(self, snapshot_id: str, name: str) -> dict[str, Any] | None:
        """The record; None when there is none or it cannot be read as a JSON object.

        Fields of another type than nodus writes are left out: a pin whose ``kinds`` is not a
        list of kinds then holds every kind, the safe reading of a hold nobody can read.
        """
        try:
            record = json.loads(self._storage.read(keys.hold_key(snapshot_id, name)))
        except (FileNotFoundError, ValueError, RecursionError):
            return None
        if not isinstance(record, dict):
            return None
        kinds = record.get("kinds")
        if not isinstance(kinds, list) or not all(kind in KINDS for kind in kinds):
            record.pop("kinds", None)
        for field, types in (("by", str), ("at", int | float)):
            if not isinstance(record.get(field), types) or isinstance(record.get(field), bool):
                record.pop(field, None)
        return record

    def write(self, snapshot_id: str, name: str, record: dict[str, Any]) -> None:
        self._storage.write(
            keys.hold_key(snapshot_id, name), json.dumps(record, sort_keys=True).encode()
        )

    def delete(self, snapshot_id: str, name: str) -> None:
        self._storage.delete(keys.hold_key(snapshot_id, name))

    def delete_all(self, snapshot_id: str) -> int:
        """Remove every record on ``snapshot_id`` (it is gone); returns how many there were."""
        found = self._storage.list(keys.hold_folder(snapshot_id))
        for info in found:
            self._storage.delete(info.key)
        return len(found)
