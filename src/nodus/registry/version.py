"""A registered model version: the registry's one representation of it.

A version is recorded twice, by design: in the run catalog (:mod:`nodus.registry.table`, which
gives it its number and holds its aliases) and in its store
(:class:`nodus.store.model_records.ModelVersion`, which references its weights' blobs, so a
catalog rebuilt from the store alone finds it). Both are read into :class:`Version` and written
from it: the catalog's rows by the table, the store's record by :meth:`Version.record` and
:meth:`Version.of_record`, so the fields a version has are listed here and in those two formats
only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the catalog imports this module: it does not pay for the store's
    from nodus.store.manifest import FileEntry
    from nodus.store.model_records import ModelVersion

__all__ = ["ORIGINS", "Version"]

ORIGINS = ("epoch", "run", "manual")
"""How a version came to be: an epoch-end save, its run's model, ``nodus models register``."""


@dataclass(frozen=True)
class Version:
    """One registered version as people see it (the ``models get --json`` shape)."""

    name: str
    version: int  # 0 until the catalog numbers it (see ``ModelTable.add``)
    run: str
    snapshot: str
    stage: str | None
    step: int | None
    epoch: float | None
    store: str  # the store holding the version's record and blobs
    origin: str  # one of ORIGINS
    run_model: bool
    bytes: int
    registered_at: float
    aliases: tuple[str, ...] = field(default=())

    @property
    def ref(self) -> str:
        """The exact reference, ``NAME:VERSION``."""
        return f"{self.name}:{self.version}"

    def to_dict(self) -> dict[str, Any]:
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

    def record(self, files: tuple[FileEntry, ...]) -> ModelVersion:
        """The version's record in its store, referencing ``files`` (its weights)."""
        from nodus.store.model_records import ModelVersion

        return ModelVersion(
            name=self.name,
            version=self.version,
            run=self.run,
            snapshot=self.snapshot,
            stage=self.stage,
            step=self.step,
            epoch=self.epoch,
            origin=self.origin,
            registered_at=self.registered_at,
            files=tuple(files),
            run_model=self.run_model,
        )

    @classmethod
    def of_record(cls, record: ModelVersion, store: str) -> Version:
        """The version ``record`` in the store at ``store`` describes (aliases not included:
        the store keeps them apart)."""
        return cls(
            name=record.name,
            version=record.version,
            run=record.run,
            snapshot=record.snapshot,
            stage=record.stage,
            step=record.step,
            epoch=record.epoch,
            store=store,
            origin=record.origin,
            run_model=record.run_model,
            bytes=record.total_bytes,
            registered_at=record.registered_at,
        )
