"""Registration, in one place: what a run registers in the model registry by itself, and when.

- **Each epoch's weights as the epoch ends.** With ``save_each_epoch`` every epoch-end save's
  weights become a version of the run's model when that snapshot commits: the runner's rotation
  pass after each commit calls :func:`register_epoch_saves`.
- **The run's model at the end.** When the run has SUCCEEDED, its model, the save at its last
  update (:func:`nodus.retention.holds.run_model`), is registered once and marked as the run's
  model (:func:`register_run_model`; the runner calls :func:`register_model` right after setting
  SUCCEEDED). A final save that is also an epoch save already has its version: it is marked,
  never registered a second time. Epoch saves still unregistered when the run ends (a rotation
  pass cut short) are registered first, oldest first, so versions keep the order in which the
  epochs ended.
- **Caught up.** A runner killed between SUCCEEDED and the registration leaves a succeeded run
  with no model; ``nodus gc`` and adoption (a run rebuilt or refreshed from its store's record)
  catch it up (:func:`catch_up`).

All of it is idempotent: a snapshot registered under a name keeps its version, an epoch a
recovery saved again (a second attempt reaching the same epoch end) is not registered twice, and
a catch-up racing the runner, or another catch-up, never makes a second version. A catch-up
never undoes a deletion: a run whose model this catalog registered once (its
``run_model_registered`` event) is left alone after ``nodus models delete`` removed it.

The registry's own mechanism (numbers, aliases, the store's record) is
:class:`nodus.registry.Registry`; this module only decides what a run registers and records
it in the run's events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodus.errors import NodusError
from nodus.registry import Registry
from nodus.retention.holds import is_epoch_save, run_model
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.phases import Phase
from nodus.store.kinds import KIND_WEIGHTS

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore
    from nodus.store.model_records import ModelVersion

__all__ = [
    "REGISTERED",
    "catch_up",
    "model_name",
    "register_epoch_saves",
    "register_model",
    "register_run_model",
    "version_event",
]

REGISTERED = "run_model_registered"
"""The event that says the run's model was registered here (its details: the version)."""


def model_name(run: Any) -> str:
    """The name a run's versions are registered under: the run's (workload's) name."""
    return str(run.name)


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


def register_model(catalog: Catalog, store: SnapshotStore, run_id: str) -> ModelVersion | None:
    """Register ``run_id``'s model (and any epoch save still unregistered); the run's model.

    A store that fails leaves a ``model_registration_failed`` event: the run still succeeded,
    its model stays held, and the next ``nodus gc`` tries again.
    """
    try:
        return _register(catalog, store, catalog.get_run(run_id), {})
    except NodusError:
        return None


def catch_up(
    catalog: Catalog,
    store: SnapshotStore,
    run: Run,
    by: str,
    manifests: list[Manifest] | None = None,
) -> ModelVersion | None:
    """Register the model of a SUCCEEDED ``run`` that has none yet; the version made, or None
    (not succeeded, registered already, registered here once and deleted since, no weights).

    ``by`` (``gc``, ``adoption``) is recorded in the events; ``manifests``: the run's
    checkpoints when the caller listed them already. NodusError when the store fails (recorded
    as a ``model_registration_failed`` event too).
    """
    if run.phase != Phase.SUCCEEDED or Registry(catalog.models).run_model(run.id) is not None:
        return None
    if catalog.has_event(run.id, REGISTERED):
        return None  # `nodus models delete` removed it: a catch-up must not bring it back
    return _register(catalog, store, run, {"caught_up_by": by}, manifests)


def _register(
    catalog: Catalog,
    store: SnapshotStore,
    run: Run,
    detail: dict[str, Any],
    manifests: list[Manifest] | None = None,
) -> ModelVersion | None:
    try:
        if manifests is None:
            manifests = store.list(run=run.id)
        model, made = register_run_model(Registry(catalog.models), store, run, manifests)
    except NodusError as error:
        catalog.add_event(run.id, "model_registration_failed", {"error": str(error), **detail})
        raise
    for version in made:
        catalog.add_event(run.id, "model_version_registered", {**version_event(version), **detail})
    if model is not None:
        catalog.add_event(run.id, REGISTERED, {**version_event(model), **detail})
    return model
