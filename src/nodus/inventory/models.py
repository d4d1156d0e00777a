"""``nodus models …`` and ``nodus snapshots candidate|register``: the registry as people ask.

Each function returns the documented ``--json`` shape (docs/cli.md, "Model registry"); the
command line prints it and :class:`nodus.Client` returns it. The registry itself (numbers,
aliases, what a reference resolves to) is :mod:`nodus.registry`; this module adds the snapshot
references (``ID``, ``RUN@STEP``) and the downloads.
"""

from __future__ import annotations

from typing import IO, Any

from nodus.errors import UsageError
from nodus.inventory.download import download_weights
from nodus.inventory.refs import Lookup
from nodus.registry import Registry
from nodus.registry.naming import check_name, parse_version
from nodus.retention.holds import is_epoch_save
from nodus.store.model_records import ModelVersion

__all__ = [
    "alias_model",
    "candidate",
    "delete_model",
    "download_model",
    "get_model",
    "list_models",
    "register_snapshot",
]


def registry_of(lookup: Lookup) -> Registry:
    return Registry(lookup.catalog.models, open_store=lookup.store)


def list_models(lookup: Lookup) -> list[dict[str, Any]]:
    """Every version, by name then number; ``newest`` marks what a bare ``NAME`` resolves to."""
    versions = registry_of(lookup).versions()
    newest = {v.name: v.version for v in versions}  # ordered by number: the last one wins
    return [{**v.summary(), "newest": newest[v.name] == v.version} for v in versions]


def get_model(lookup: Lookup, ref: str) -> dict[str, Any]:
    """One version with its files (path, size, blob hash) as its store record names them."""
    registry = registry_of(lookup)
    version = registry.resolve(ref)
    _store, record = registry.record(version)
    files = [{"path": e.path, "size": e.size, "hash": e.hash} for e in record.files]
    return {**_shown(registry, version), "files": files}


def alias_model(lookup: Lookup, name: str, version: str | int, alias: str) -> dict[str, Any]:
    """Point ``alias`` at ``name``'s ``version`` (moving it); the version it now names."""
    number = version if isinstance(version, int) else parse_version(str(version))
    registry = registry_of(lookup)
    return _shown(registry, registry.set_alias(check_name(name), number, alias))


def delete_model(lookup: Lookup, ref: str) -> dict[str, Any]:
    """Remove ``NAME:VERSION`` and its aliases; its blobs nothing else references are freed."""
    version, report = registry_of(lookup).delete(ref)
    return {
        **version.summary(),
        "deleted_blobs": report.deleted_blobs,
        "freed_bytes": report.freed_bytes,
        "deferred": report.deferred,
    }


def download_model(
    lookup: Lookup, ref: str, to: str, stream: IO[str] | None = None
) -> dict[str, Any]:
    """Lay a version's weights out in the new or empty folder ``to``, every file verified."""
    registry = registry_of(lookup)
    version = registry.resolve(ref)
    store, record = registry.record(version)
    files = download_weights(store, record.as_manifest(), version.ref, to, stream)
    return {"model": version.ref, "snapshot": version.snapshot, "to": to, "files": files}


def candidate(lookup: Lookup, ref: str) -> dict[str, Any]:
    """For an epoch save: the version registered for it, its epoch and step (docs/lineage.md)."""
    located = lookup.locate(ref)
    manifest, run = located.manifest, located.run
    versions = registry_of(lookup).of_snapshot(manifest.id)
    epoch_save = is_epoch_save(manifest, run)
    epoch_versions = [v for v in versions if v.origin == "epoch"] or versions
    data = {
        "snapshot": manifest.id,
        "run": manifest.run,
        "stage": manifest.stage,
        "step": manifest.step,
        "epoch": manifest.epoch,
        "epoch_save": epoch_save,
        "version": epoch_versions[0].ref if epoch_save and epoch_versions else None,
        "versions": [v.ref for v in versions],
        "reason": None,
    }
    if not epoch_save:
        data["reason"] = (
            f"{manifest.id} (step {manifest.step}, epoch {_epoch(manifest.epoch)}) is not an "
            "epoch-end save: only the save at the end of an epoch of a stage with "
            "save_each_epoch is a candidate; `nodus snapshots register` makes any save with "
            "weights a version"
        )
    elif data["version"] is None:
        data["reason"] = (
            f"the epoch {_epoch(manifest.epoch)} save {manifest.id} has no version (yet): it "
            "is registered when its snapshot commits; see the run's events "
            "(model_registration_failed)"
        )
    return data


def register_snapshot(lookup: Lookup, ref: str, model: str | None = None) -> dict[str, Any]:
    """Register a snapshot's weights as a new version of ``model`` (default: its run's name)."""
    located = lookup.locate(ref)
    if model is None:
        if located.run is None:
            raise UsageError(
                f"{located.manifest.id} belongs to {located.manifest.run}, a run this catalog "
                "does not know: name the model with --model NAME"
            )
        model = located.run.name
    registry = registry_of(lookup)
    version, new = registry.register(located.store, located.manifest, model, "manual")
    return {**_shown(registry, version), "new": new}


def _shown(registry: Registry, version: ModelVersion) -> dict[str, Any]:
    newest = registry.resolve(version.name)
    return {**version.summary(), "newest": newest.version == version.version}


def _epoch(epoch: float | None) -> str:
    return "unknown" if epoch is None else f"{epoch:g}"
