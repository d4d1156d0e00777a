"""A run's model in the registry: registered when the run succeeds, caught up when that was cut.

The runner registers a run's model right after setting SUCCEEDED (:func:`register_model`). A
runner killed between the two leaves a succeeded run with no model; ``nodus gc`` and adoption
(a run rebuilt or refreshed from its store's record) catch it up (:func:`catch_up`).
Registration is idempotent (:func:`nodus.registry.registration.register_run_model`), so a
catch-up racing the runner, or another catch-up, never makes a second version.

A catch-up never undoes a deletion: a run whose model this catalog registered once (its
``run_model_registered`` event) is left alone after ``nodus models delete`` removed it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodus.errors import NodusError
from nodus.registry import Registry
from nodus.registry.registration import register_run_model, version_event
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.phases import Phase

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore
    from nodus.store.model_records import ModelVersion

__all__ = ["REGISTERED", "catch_up", "register_model"]

REGISTERED = "run_model_registered"
"""The event that says the run's model was registered here (its details: the version)."""


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
