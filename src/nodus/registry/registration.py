"""What a run registers by itself: each epoch's weights as the epoch ends, its model at the end.

Seed rules (001, "Epoch adapters"): with ``save_each_epoch`` every epoch-end save's weights
become a version of the run's model when that snapshot commits (the runner's rotation pass after
each commit calls :func:`register_epoch_saves`); when the run has SUCCEEDED, its model, the save
at its last update (:func:`nodus.retention.holds.run_model`), is registered once
(:func:`register_run_model`) and marked as the run's model. A final save that is also an epoch
save already has its version: it is marked, never registered a second time. Epoch saves still
unregistered when the run ends (a rotation pass cut short) are registered first, oldest first,
so versions keep the order in which the epochs ended.

Both are idempotent: a snapshot registered under a name keeps its version, and an epoch a
recovery saved again (a second attempt reaching the same epoch end) is not registered twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodus.registry.registry import Registry
from nodus.retention.holds import is_epoch_save, run_model
from nodus.store.kinds import KIND_WEIGHTS
from nodus.store.model_records import ModelVersion

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore

__all__ = ["model_name", "register_epoch_saves", "register_run_model", "version_event"]


def model_name(run: Any) -> str:
    """The name a run's versions are registered under: the run's (workload's) name."""
    return run.name


def version_event(version: ModelVersion) -> dict[str, Any]:
    """The details of a ``model_version_registered`` event in the run's event log."""
    return {
        "model": version.ref,
        "snapshot": version.snapshot,
        "step": version.step,
        "epoch": version.epoch,
        "origin": version.origin,
    }


def register_epoch_saves(
    registry: Registry, store: SnapshotStore, run: Any, manifests: list[Manifest]
) -> list[ModelVersion]:
    """Register each of ``run``'s epoch-end saves that has no version yet; the new versions."""
    name = model_name(run)
    done = {
        (version.stage, version.epoch)
        for version in registry.table.of_run(run.id)
        if version.name == name and version.origin == "epoch"
    }
    made = []
    for manifest in sorted(manifests, key=lambda m: (m.step or 0, m.created)):
        if not is_epoch_save(manifest, run) or KIND_WEIGHTS not in manifest.kinds:
            continue
        if (manifest.stage, manifest.epoch) in done:
            continue
        version, new = registry.register(store, manifest, name, "epoch")
        done.add((manifest.stage, manifest.epoch))
        if new:
            made.append(version)
    return made


def register_run_model(
    registry: Registry, store: SnapshotStore, run: Any, manifests: list[Manifest]
) -> tuple[ModelVersion | None, list[ModelVersion]]:
    """Register a SUCCEEDED run's model (after any epoch save still unregistered) and mark it;
    (the run's model, the versions newly made)."""
    made = register_epoch_saves(registry, store, run, manifests)
    model_id = run_model(run, manifests)
    if model_id is None:
        return None, made
    manifest = next(m for m in manifests if m.id == model_id)
    version, new = registry.register(store, manifest, model_name(run), "run")
    if new:
        made.append(version)
    return registry.mark_run_model(version), made
