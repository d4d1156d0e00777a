"""Model-registry versions in the store: each version's own reference to its weights' blobs.

A version record names the weights files of one snapshot by path, size and blob hash. Blobs are
content-addressed, so no byte is copied, yet the blobs stay referenced (and ``nodus gc`` keeps
them) after retention deleted that snapshot's weights, or the whole snapshot. The registry
(:mod:`nodus.registry`) decides names, numbers and aliases in the run catalog; these records
mirror them, so a catalog rebuilt from the store alone finds every version::

    models/<name>/<version>.json   {"format": 1, "name", "version", "run", "snapshot", "stage",
                                    "step", "epoch", "origin", "run_model", "registered_at",
                                    "files": [FileEntry, ...]}
    models/<name>/aliases.json     {"aliases": {"best": 2, ...}}

Each record is one atomic write (a storage ``write`` is temp + rename, or one PUT).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from nodus.errors import StoreError
from nodus.store import fields, keys
from nodus.store.manifest import FileEntry, Manifest
from nodus.store.storage import Storage

__all__ = ["FORMAT", "ORIGINS", "ModelRecords", "ModelVersion"]

FORMAT = 1
"""Record format; a reader refuses a newer one rather than misread what it holds."""


ORIGINS = ("epoch", "run", "manual")
"""How a version came to be: an epoch-end save, its run's model, ``nodus models register``."""


@dataclass(frozen=True)
class ModelVersion:
    """One registered version: where its weights came from and the files that are them.

    The one type of a version, wherever it is read from. The store's record
    (:meth:`to_dict`, :meth:`from_dict`) holds its weights' ``files``; the run catalog's row
    (:mod:`nodus.registry.table`) holds its number's ``store``, ``bytes`` and ``aliases``
    instead, and no files (:meth:`nodus.registry.Registry.record` reads them from the store).
    """

    name: str
    version: int  # 0 until the catalog numbers it (see ``ModelTable.add``)
    run: str
    snapshot: str
    stage: str | None
    step: int | None
    epoch: float | None
    origin: str  # one of ORIGINS
    registered_at: float  # seconds since the epoch
    files: tuple[FileEntry, ...] = ()  # the weights; a catalog row has none
    run_model: bool = False  # the save at its run's last update (``runs get`` names it)
    store: str = ""  # the URL of the store holding the record; a catalog row says it
    bytes: int = 0  # the weights' size: their files' when the version has them
    aliases: tuple[str, ...] = field(default=())  # the catalog's aliases pointing at it

    def __post_init__(self) -> None:
        if self.files:  # the size is the files', whoever built the version
            object.__setattr__(self, "bytes", sum(entry.size for entry in self.files))

    @property
    def ref(self) -> str:
        """The exact reference, ``NAME:VERSION``."""
        return f"{self.name}:{self.version}"

    @property
    def blobs(self) -> frozenset[str]:
        return frozenset(entry.hash for entry in self.files if not entry.is_link)

    def summary(self) -> dict[str, Any]:
        """The version as people see it (the ``models get --json`` shape, docs/cli.md)."""
        return {
            "ref": self.ref,
            "name": self.name,
            "version": self.version,
            "aliases": list(self.aliases),
            "run": self.run,
            "snapshot": self.snapshot,
            "stage": self.stage,
            "step": self.step,
            "epoch": self.epoch,
            "origin": self.origin,
            "run_model": self.run_model,
            "bytes": self.bytes,
            "registered_at": self.registered_at,
            "store": self.store,
        }

    def as_manifest(self) -> Manifest:
        """The version as a snapshot holding only its weights (downloads lay it out so)."""
        return Manifest(
            id=self.snapshot,
            run=self.run,
            stage=self.stage,
            attempt=0,
            step=self.step,
            epoch=self.epoch,
            metrics={},
            role="checkpoint",
            created=self.registered_at,
            files=self.files,
        )

    def with_run_model(self) -> ModelVersion:
        return replace(self, run_model=True)

    def to_dict(self) -> dict[str, Any]:
        """The store's record (its ``store``, ``bytes`` and ``aliases`` are the catalog's)."""
        return {
            "format": FORMAT,
            "name": self.name,
            "version": self.version,
            "run": self.run,
            "snapshot": self.snapshot,
            "stage": self.stage,
            "step": self.step,
            "epoch": self.epoch,
            "origin": self.origin,
            "run_model": self.run_model,
            "registered_at": self.registered_at,
            "files": [entry.to_dict() for entry in self.files],
        }

    @classmethod
    def from_dict(cls, data: Any) -> ModelVersion:
        """The record ``data`` describes, every field checked (``fields.Damage`` names one
        that is not what nodus writes; its files are checked as a manifest's are)."""
        data = fields.mapping(data, "record")
        if (fields.integer(data, "format", optional=True) or 0) > FORMAT:
            raise ValueError(f"model record format {data['format']} is newer than nodus reads")
        return cls(
            name=fields.text(data, "name"),
            version=fields.integer(data, "version", minimum=1),
            run=fields.text(data, "run"),
            snapshot=fields.text(data, "snapshot"),
            stage=fields.text(data, "stage", optional=True),
            step=fields.integer(data, "step", optional=True, minimum=0),
            epoch=fields.number(data, "epoch", optional=True, finite=False),
            origin=fields.text(data, "origin"),
            registered_at=float(fields.number(data, "registered_at")),
            files=tuple(
                FileEntry.from_dict(item, f"files[{index}]")
                for index, item in enumerate(fields.sequence(data, "files"))
            ),
            run_model=data.get("run_model") is True,
        )


class ModelRecords:
    """The version and alias records of one store."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._read: dict[str, tuple[float, ModelVersion]] = {}  # key -> (its time, record)

    def list(self, name: str | None = None) -> list[ModelVersion]:
        """Every version record (of ``name``), by name then version.

        StoreError for one that cannot be read: its blobs cannot be told from garbage, so no
        caller may go on as if it were not there.
        """
        found = []
        for info in self._storage.list(keys.MODELS):
            parsed = keys.model_version_of_key(info.key)
            if parsed is None or (name is not None and parsed[0] != name):
                continue
            record = self._load(info.key, info.modified)
            if record is not None:
                found.append(record)
        return sorted(found, key=lambda v: (v.name, v.version))

    def read(self, name: str, version: int) -> ModelVersion | None:
        key = keys.model_version_key(name, version)
        return self._load(key, None) if self._storage.exists(key) else None

    def write(self, record: ModelVersion) -> None:
        key = keys.model_version_key(record.name, record.version)
        self._storage.write(key, json.dumps(record.to_dict(), sort_keys=True).encode())
        self._read.pop(key, None)

    def delete(self, name: str, version: int) -> None:
        key = keys.model_version_key(name, version)
        self._storage.delete(key)
        self._read.pop(key, None)

    def aliases(self, name: str) -> dict[str, int]:
        try:
            data = json.loads(self._storage.read(keys.model_aliases_key(name)))
        except (FileNotFoundError, ValueError):
            return {}
        aliases = data.get("aliases") if isinstance(data, dict) else None
        if not isinstance(aliases, dict):
            return {}
        # An alias naming no version number is not one nodus wrote: left out, never a crash.
        return {
            str(k): v
            for k, v in aliases.items()
            if isinstance(v, int) and not isinstance(v, bool) and v > 0
        }

    def write_aliases(self, name: str, aliases: dict[str, int]) -> None:
        data = json.dumps({"aliases": dict(sorted(aliases.items()))}).encode()
        self._storage.write(keys.model_aliases_key(name), data)

    def held_blobs(self) -> set[str]:
        """Every blob a version references (the blob sweep's mark adds these)."""
        held: set[str] = set()
        for record in self.list():
            held |= record.blobs
        return held

    def _load(self, key: str, modified: float | None) -> ModelVersion | None:
        # Listings run at every rotation pass: a record whose time has not changed since it was
        # read is not read again (a rewrite, marking the run's model, changes its time).
        cached = self._read.get(key)
        if cached is not None and modified is not None and cached[0] == modified:
            return cached[1]
        try:
            record = ModelVersion.from_dict(json.loads(self._storage.read(key)))
        except FileNotFoundError:
            return None  # deleted while we looked
        except (ValueError, KeyError, TypeError, RecursionError) as error:
            raise StoreError(
                f"the model-version record {key} in {self._storage.url} cannot be read "
                f"({error}); blob GC stopped until it is repaired or removed"
            ) from None
        if modified is not None:
            self._read[key] = (modified, record)
        return record
