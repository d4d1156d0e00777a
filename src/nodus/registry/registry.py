"""The model registry: versions of named models, their aliases, and how a reference resolves.

Two halves, one contract: the catalog's tables (:mod:`nodus.registry.table`) give each version
its number and hold the aliases; the version's store keeps its record
(:mod:`nodus.store.model_records`), which references the weights' blobs, so a version keeps its
weights whatever snapshot retention does and ``nodus gc`` sweeps them only once it is deleted.
Both halves are read into and written from one :class:`nodus.store.model_records.ModelVersion`.
The catalog is written first (it decides the number), the store record right after; a version
whose store record cannot be written is taken back out of the catalog.

``NAME`` alone resolves to the newest version, which can be an epoch save registered after the
run's model: automation names an exact version (``NAME:3``) or an alias (``NAME@prod``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from nodus.errors import NotFoundError, StoreError, UsageError
from nodus.registry.naming import check_alias, check_name, parse_exact, parse_model_ref
from nodus.registry.table import ModelTable
from nodus.store.kinds import KIND_WEIGHTS
from nodus.store.model_records import ORIGINS, ModelVersion

if TYPE_CHECKING:
    from nodus.store import FileEntry, GcReport, Manifest, SnapshotStore

__all__ = ["Registry"]


class Registry:
    """The registry of one nodus home: its catalog's tables and the stores versions live in."""

    def __init__(
        self, table: ModelTable, open_store: Callable[[str], SnapshotStore] | None = None
    ) -> None:
        self.table = table
        self._open = open_store
        self._stores: dict[str, SnapshotStore] = {}

    # --- registering ------------------------------------------------------------------------

    def register(
        self, store: SnapshotStore, manifest: Manifest, name: str, origin: str
    ) -> tuple[ModelVersion, bool]:
        """Register ``manifest``'s weights as a version of ``name``: (version, newly made).

        A snapshot already registered under ``name`` keeps its version (registration is
        idempotent: re-driving a run or adopting it never makes a second one).
        """
        check_name(name)
        assert origin in ORIGINS, origin
        self._stores.setdefault(store.url, store)
        known = self.table.of_snapshot(manifest.id, name)
        if known and store.model_records.read(name, known[0].version) is not None:
            return known[0], False
        files = _weights_of(manifest)
        if known:  # a crash kept its store record from being written: write it now
            store.add_model_version(replace(known[0], files=files))
            return known[0], False
        stored = [r for r in store.model_records.list(name) if r.snapshot == manifest.id]
        if stored:  # registered by a catalog this one was not rebuilt with
            self.table.insert(replace(stored[0], store=store.url))
            return self.table.of_snapshot(manifest.id, name)[0], False
        numbers = [r.version for r in store.model_records.list(name)]
        version = self.table.add(
            _new_version(manifest, name, origin, store.url, files),
            at_least=max(numbers, default=0) + 1,
        )
        try:
            store.add_model_version(replace(version, files=files))
        except (NotFoundError, StoreError):
            self.table.remove(version.name, version.version)
            raise
        return version, True

    def mark_run_model(self, version: ModelVersion) -> ModelVersion:
        """Name ``version`` its run's model (``runs get`` shows it), in catalog and store."""
        if version.run_model:
            return version
        self.table.mark_run_model(version.name, version.version)
        store = self._store(version.store)
        record = store.model_records.read(version.name, version.version)
        if record is not None:
            store.model_records.write(record.with_run_model())
        return self.get(version.name, version.version)

    # --- looking up -------------------------------------------------------------------------

    def resolve(self, text: str) -> ModelVersion:
        """The version ``NAME``, ``NAME:VERSION`` or ``NAME@ALIAS`` names; NotFoundError names
        what is missing."""
        ref = parse_model_ref(text)
        self._known(ref.name)
        if ref.version is not None:
            return self.get(ref.name, ref.version)
        if ref.alias is not None:
            number = self.table.alias(ref.name, ref.alias)
            if number is None:
                have = ", ".join(self.table.aliases(ref.name)) or "none"
                raise NotFoundError(
                    f"model {ref.name!r} has no alias {ref.alias!r} (its aliases: {have})"
                )
            return self.get(ref.name, number)
        newest = self.table.newest(ref.name)
        if newest is None:
            raise NotFoundError(f"model {ref.name!r} has no versions left")
        return newest

    def get(self, name: str, version: int) -> ModelVersion:
        found = self.table.get(name, version)
        if found is None:
            numbers = [v.version for v in self.versions() if v.name == name]
            have = ", ".join(map(str, numbers)) or "none"
            raise NotFoundError(f"model {name!r} has no version {version} (its versions: {have})")
        return found

    def versions(self) -> list[ModelVersion]:
        """Every version, by name then number."""
        return self.table.all()

    def of_snapshot(self, snapshot_id: str) -> list[ModelVersion]:
        return self.table.of_snapshot(snapshot_id)

    def run_model(self, run_id: str) -> ModelVersion | None:
        """The version that is ``run_id``'s own model, once it is registered."""
        return next((v for v in self.table.of_run(run_id) if v.run_model), None)

    def record(self, version: ModelVersion) -> tuple[SnapshotStore, ModelVersion]:
        """The version's store and its record there (the files to download)."""
        store = self._store(version.store)
        record = store.model_records.read(version.name, version.version)
        if record is None:
            raise NotFoundError(
                f"{version.ref}: its record is missing from {version.store}; delete the "
                f"version (nodus models delete {version.ref}) and register its snapshot again"
            )
        return store, record

    # --- changing ---------------------------------------------------------------------------

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion:
        """Point ``alias`` at an existing version of ``name``, moving it from any other."""
        self._known(check_name(name))
        target = self.get(name, version)
        self.table.set_alias(name, check_alias(alias), version)
        self._mirror_aliases(name)
        return self.get(name, target.version)

    def delete(self, text: str) -> tuple[ModelVersion, GcReport]:
        """Remove ``NAME:VERSION`` and its aliases; its blobs that nothing else references are
        freed at once (a sweep deferred by a running capture leaves them to ``nodus gc``)."""
        ref = parse_exact(text)
        self._known(ref.name)
        assert ref.version is not None
        version = self.get(ref.name, ref.version)
        report = self._store(version.store).delete_model_version(version.name, version.version)
        self.table.remove(version.name, version.version)
        self._mirror_aliases(version.name)
        return version, report

    def adopt(self, store: SnapshotStore, run_id: str) -> int:
        """Enter the versions ``store`` records for ``run_id`` into the catalog (a run rebuilt
        from its store, or driven on by another machine since); how many were new here. Their
        aliases come along unless set here; a version known here already takes the store's
        run's-model mark (another machine marked it when the run succeeded there)."""
        added = 0
        for record in store.model_records.list():
            if record.run != run_id:
                continue
            known = self.table.get(record.name, record.version)
            if known is not None:
                if record.run_model and known.snapshot == record.snapshot:
                    self.table.mark_run_model(record.name, record.version)
                continue
            self.table.insert(replace(record, store=store.url))
            added += 1
            for alias, number in store.model_records.aliases(record.name).items():
                if number == record.version and self.table.alias(record.name, alias) is None:
                    self.table.set_alias(record.name, alias, number)
        return added

    # --- plumbing ---------------------------------------------------------------------------

    def _known(self, name: str) -> None:
        if name not in self.table.names():
            have = ", ".join(self.table.names()) or "none yet"
            raise NotFoundError(f"no model named {name!r} (models: {have})")

    def _store(self, url: str) -> SnapshotStore:
        if url not in self._stores:
            if self._open is None:
                from nodus.store import open_store

                self._stores[url] = open_store(url)
            else:
                self._stores[url] = self._open(url)
        return self._stores[url]

    def _mirror_aliases(self, name: str) -> None:
        """Each store holding versions of ``name`` keeps the aliases that point into it."""
        aliases = self.table.aliases(name)
        by_store: dict[str, set[int]] = {}
        for version in self.versions():
            if version.name == name:
                by_store.setdefault(version.store, set()).add(version.version)
        for url, numbers in by_store.items():
            mine = {alias: n for alias, n in aliases.items() if n in numbers}
            self._store(url).model_records.write_aliases(name, mine)


def _weights_of(manifest: Manifest) -> tuple[FileEntry, ...]:
    if manifest.role != "checkpoint":
        raise UsageError(
            f"{manifest.id} is a run's {manifest.role} snapshot: only checkpoints' weights "
            "are registered as model versions"
        )
    files = tuple(e for e in manifest.held_files((KIND_WEIGHTS,)) if not e.is_link)
    if not files:
        why = (
            "retention deleted them"
            if KIND_WEIGHTS in manifest.deleting
            else f"it holds {', '.join(manifest.kinds) or 'nothing'}"
        )
        raise UsageError(f"{manifest.id} holds no weights to register ({why})")
    return files


def _new_version(
    manifest: Manifest, name: str, origin: str, store_url: str, files: tuple[FileEntry, ...]
) -> ModelVersion:
    """The version registering ``files`` of ``manifest`` makes, before the catalog numbers it."""
    return ModelVersion(
        name=name,
        version=0,
        run=manifest.run,
        snapshot=manifest.id,
        stage=manifest.stage,
        step=manifest.step,
        epoch=manifest.epoch,
        store=store_url,
        origin=origin,
        registered_at=time.time(),
        files=files,
    )
