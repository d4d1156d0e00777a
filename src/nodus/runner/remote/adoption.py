"""Adoption: a run this machine's catalog does not know, rebuilt from its store's record.

The record's format is defined here, both ways: :func:`record_of` builds it from the catalog
(the runner writes it, :mod:`nodus.runner.remote.record`) and adoption reads it back.

On a machine with an empty ``$NODUS_HOME`` (the old one is lost), ``nodus runs resume RUN
--store URL`` and ``nodus run FILE --key KEY --store URL`` find the run's record in the store
(:mod:`nodus.store.run_records`, written by :mod:`nodus.runner.remote.record`) and write the
catalog rows it needs: the run with its stored resolution and launches, its stages with their
source snapshots and recoveries, and every attempt, so attempt numbers (the fencing tokens) go
on above the ones the record knows. From there the run is resumed as any other: an attempt
left running is reaped as "its runner died" and the stage continues from its newest committed
snapshot in the store. The run's model-registry versions are entered from their store records
too (:meth:`nodus.registry.Registry.adopt`), with their numbers and aliases.

The same rows replace a catalog entry that is behind the store (another machine drove the run
since), once the lease is held: the runner then continues from where that machine stopped, and
the versions that machine registered come along the same way.

A SUCCEEDED run whose model no machine registered (its runner was killed in between) gets it
registered here (:func:`nodus.runner.upkeep.registration.catch_up`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nodus.errors import NodusError, StoreError
from nodus.registry import Registry
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.locks import lock_name_for
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.catalog.run_ids import RUN_ID
from nodus.runner.upkeep.registration import catch_up
from nodus.store.run_records import RunRecords

if TYPE_CHECKING:
    from nodus.store import SnapshotStore

# What the record keeps of the catalog's rows: enough for `runs get`, for a resume to find the
# source and the newest snapshot, and for attempt numbers to go on where they stopped. Paths
# and processes of the machine that ran an attempt (its log, the runner's pid) are left out.
RUN_FIELDS = (
    "id",
    "key",
    "name",
    "workload",
    "store",
    "phase",
    "exit_status",
    "message",
    "created_at",
    "updated_at",
    "finished_at",
    "launch",
    "parent",  # absent from records written before lineage: read as None
)
STAGE_FIELDS = ("idx", "name", "phase", "source_snapshot", "recoveries")
ATTEMPT_FIELDS = (
    "number",
    "outcome",
    "detail",
    "restored_snapshot",
    "restored_step",
    "pid",
    "host",
    "devices",
    "started_at",
    "ended_at",
)


def record_of(run: Run, driver: str | None) -> dict[str, Any]:
    """The store's record of ``run`` (read with its stages); ``driver`` is the writer's lease."""
    record: dict[str, Any] = {name: getattr(run, name) for name in RUN_FIELDS}
    record["stages"] = [
        {
            **{name: stage[name] for name in STAGE_FIELDS},
            "attempts": [{name: a[name] for name in ATTEMPT_FIELDS} for a in stage["attempts"]],
        }
        for stage in run.stages
    ]
    record["driver"] = driver
    return record


def adopt_from_store(catalog: Catalog, store: SnapshotStore, ref: str) -> Run | None:
    """The run ``ref`` (an id or a ``--key``) adopted from ``store``'s record; None without one.

    The adopted run keeps its snapshots in ``store``, by the URL this machine reaches it with.
    """
    records = RunRecords(store.storage)
    record = records.read(ref) if RUN_ID.match(ref) else None
    if record is None:  # a key, which may look like a run id
        run_id = records.run_of_key(ref)
        record = records.read(run_id) if run_id is not None else None
    if record is None:
        return None
    _check_names(record, store.url)
    _write_rows(catalog, record, store.url)
    attempts = sum(len(stage["attempts"]) for stage in record["stages"])
    details = {"store": store.url, "phase": record["phase"], "attempts": attempts}
    details["model_versions"] = _adopt_versions(catalog, store, record["id"])
    catalog.add_event(record["id"], "adopted", details)
    return catalog.get_run(record["id"])


def refresh(catalog: Catalog, store: SnapshotStore, records: RunRecords, run: Run) -> Run:
    """``run`` as the store's record has it when that is ahead of the catalog, else as it is.

    Ahead means another machine drove it since: the record knows more attempts, or it finished.
    The model versions that machine registered come along.
    """
    record = records.read(run.id)
    if record is not None:
        _check_names(record, run.store)
    if record is None or not _ahead(record, run):
        return run
    _write_rows(catalog, record, run.store)
    details = {"store": run.store, "phase": record["phase"]}
    details["model_versions"] = _adopt_versions(catalog, store, run.id)
    catalog.add_event(run.id, "adopted", details)
    return catalog.get_run(run.id)


def _adopt_versions(catalog: Catalog, store: SnapshotStore, run_id: str) -> int:
    """Enter the run's model versions from their store records (numbers, aliases, the run's
    model) and register the run's model if no machine did; how many versions are new here."""
    added = Registry(catalog.models).adopt(store, run_id)
    try:
        if catch_up(catalog, store, catalog.get_run(run_id), "adoption") is not None:
            added += 1
    except NodusError:
        pass  # recorded as model_registration_failed; the next `nodus gc` tries again
    return added


def _check_names(record: dict[str, Any], store_url: str) -> None:
    """The phases and outcomes a record names are ones this nodus knows (the store checked
    every field's type when it read the record; these names are the runner's)."""
    try:
        Phase(record["phase"])
        for stage in record["stages"]:
            Phase(stage["phase"])
            for attempt in stage["attempts"]:
                if attempt["outcome"] is not None:
                    AttemptOutcome(attempt["outcome"])
    except (KeyError, ValueError) as error:
        raise StoreError(
            f"the record of {record.get('id')} in {store_url} is damaged ({error}); "
            "the run cannot be recovered from it"
        ) from None


def _ahead(record: dict[str, Any], run: Run) -> bool:
    known = sum(len(stage["attempts"]) for stage in run.stages)
    stored = sum(len(stage["attempts"]) for stage in record["stages"])
    return stored > known or (Phase(record["phase"]).final and not run.phase.final)


def adopt_record(catalog: Catalog, record: dict[str, Any], store_url: str) -> None:
    """Write ``record`` as the catalog's rows of its run (a Ray node's private catalog)."""
    _write_rows(catalog, record, store_url)


def _write_rows(catalog: Catalog, record: dict[str, Any], store_url: str) -> None:
    try:
        run, stages, attempts = _rows(record, store_url)
    except (KeyError, TypeError, ValueError) as error:
        raise StoreError(
            f"the record of {record.get('id')} in {store_url} is damaged ({error!r}); "
            "the run cannot be recovered from it"
        ) from None
    catalog.adopt_run(run, stages, attempts)


def _rows(
    record: dict[str, Any], store_url: str
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The catalog's rows of a record: only the fields the record format names."""
    run_id = record["id"]
    run = {
        "id": run_id,
        "key": record["key"],
        "name": record["name"],
        "workload": json.dumps(record["workload"]),
        "store": store_url,
        "lock_name": lock_name_for(run_id, record["key"]),
        "phase": record["phase"],
        "exit_status": record["exit_status"],
        "message": record["message"],
        "created_at": record["created_at"],
        "updated_at": record["updated_at"],
        "finished_at": record["finished_at"],
        "launch": json.dumps(record["launch"]) if record["launch"] is not None else None,
        "parent": json.dumps(record["parent"]) if record.get("parent") is not None else None,
    }
    stages: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    for stage in record["stages"]:
        stages.append({"run_id": run_id, **{name: stage[name] for name in STAGE_FIELDS}})
        attempts += [
            {"run_id": run_id, "stage": stage["name"], **{k: a[k] for k in ATTEMPT_FIELDS}}
            for a in stage["attempts"]
        ]
    return run, stages, attempts
