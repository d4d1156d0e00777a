"""Runs that start from another run's snapshot: the check at submit, the record, the holds.

A run started with ``resume_from = "RUN@STEP"`` (or a snapshot id) or by ``nodus runs branch``
has a parent: the snapshot it starts from. :func:`find_parent` settles it at submit, refusing
(exit 2, naming the field and both values) a source run that does not exist or has not
finished, a snapshot that is not committed or no longer holds what the mode restores, another
store, another device count, and a workload that may not continue the parent's
(:func:`nodus.schemas.continuation.continuation_problems`). The run records its parent
(:class:`Parent`) in the catalog and in its store's record, so the lineage survives adoption.

The snapshot's stage is the one that continues; the stages before it are taken as done from the
parent (their outputs are the parent's), the ones after it run as usual. Until the new run
finishes, retention keeps what its parent's snapshot must give it (a ``branch`` hold,
:mod:`nodus.retention.holds`): only the catalog knows those runs, and :func:`referencing_runs`
finds them for the runner's rotation, ``nodus gc`` and the listings.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, Problem, StoreError, UsageError, WorkloadError
from nodus.protocol import FULL_STATE, MODE_WEIGHTS
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.unrecorded import unrecorded_step
from nodus.schemas.snapshot_ref import SnapshotRef, parse_ref
from nodus.store import restorable
from nodus.store.kinds import KIND_FILES, KIND_WEIGHTS

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore

__all__ = ["SCAN", "Parent", "find_parent", "inherited_stages", "referencing_runs"]

SCAN = 10_000
"""Most runs (newest first) whose workloads are searched for a reference."""


@dataclass(frozen=True)
class Parent:
    """The snapshot a run starts from, as the catalog and the store's run record keep it."""

    run: str
    snapshot: str
    step: int
    stage: str
    mode: str  # protocol.FULL_STATE | protocol.MODE_WEIGHTS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Parent | None:
        return None if not data else cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Source:
    """A parent found at submit: its run, its snapshot's manifest, the store both live in."""

    run: Run
    manifest: Manifest
    store: SnapshotStore
    parent: Parent


def find_parent(
    catalog: Catalog,
    text: str,
    *,
    field: str,
    mode: str,
    store_url: str | None,
    devices: int | None = None,
) -> Source:
    """The snapshot ``text`` names, checked as a parent a new run may start from in ``mode``.

    ``field`` is what the user wrote it as (``resume_from``, ``SNAPSHOT``); ``store_url`` the
    new run's store (None: the parent's); ``devices`` this machine's device count, which a
    ``full-state`` start must share with the parent's attempts. Raises WorkloadError (exit 2).
    """
    try:
        ref = parse_ref(text)
    except UsageError as error:
        raise _refused(field, text, str(error)) from None
    run, manifest, store = _locate(catalog, ref, field, store_url)
    _check_kinds(manifest, mode, field, text)
    if store_url is not None and store_url != run.store:
        raise _refused(
            field,
            text,
            f"the source run {run.id} keeps its snapshots in {run.store}, this run would keep "
            f"its own in {store_url}; give --store {run.store}",
        )
    stage = manifest.stage
    if stage is None:  # every checkpoint nodus captures is a stage's (a hand-made one is not)
        raise _refused(field, text, f"{manifest.id} names no stage: not a run's checkpoint")
    if mode == FULL_STATE and devices is not None:
        _check_devices(catalog, run, stage, devices, field, text)
    parent = Parent(run.id, manifest.id, manifest.step or 0, stage, mode)
    return Source(run, manifest, store, parent)


def check_continuation(
    catalog: Catalog, source: Source, child: dict[str, Any], *, epoch_field: str | None = None
) -> None:
    """Refuse ``child`` (a resolved workload dict) where it may not continue the parent;
    ``epoch_field`` names where a refused ``save_each_epoch`` came from (``--set …``)."""
    from nodus.schemas.continuation import continuation_problems, epoch_save_problems

    mode = source.parent.mode
    problems = continuation_problems(
        source.run.workload,
        child,
        mode,
        parent_started_from_adapter=started_from_weights(catalog, source.run),
    )
    problems += epoch_save_problems(child, source.parent.stage, mode, epoch_field)
    if problems:
        raise WorkloadError(problems, f"continuing {source.parent.snapshot} of {source.run.id}")


def started_from_weights(catalog: Catalog, run: Run) -> bool:
    """Whether ``run``'s training began from another run's weights: a warm start itself, or a
    full-state continuation of a run that did (its reference weights are that run's too)."""
    seen: set[str] = set()
    while run.parent and run.id not in seen:
        seen.add(run.id)
        if run.parent.get("mode") == MODE_WEIGHTS:
            return True
        try:
            run = catalog.get_run(run.parent["run"])
        except NotFoundError:
            return False  # deleted: its start is no longer known, and nothing restores it
    return False


def inherited_stages(workload: dict[str, Any], parent: Parent) -> tuple[str, ...]:
    """The stages before the parent's: taken as done from the parent, never run again."""
    names = [stage["name"] for stage in workload["stages"]]
    return tuple(names[: names.index(parent.stage)]) if parent.stage in names else ()


# --- finding the snapshot ------------------------------------------------------------------------


def _locate(
    catalog: Catalog, ref: SnapshotRef, field: str, store_url: str | None
) -> tuple[Run, Manifest, SnapshotStore]:
    from nodus.store import open_store

    if ref.snapshot_id is not None:
        return _by_id(catalog, ref, field, store_url)
    run, stage = _run_named(catalog, ref.run or "", field, ref.text)
    _check_finished(run, field, ref.text)
    store = open_store(run.store)
    _refuse_unrecorded(catalog, run, ref.step, field, ref.text)
    manifests = restorable.current(store.list(run=run.id, stage=stage))
    found = restorable.by_recency(m for m in manifests if m.step == ref.step)
    if not found:
        steps = ", ".join(str(s) for s in sorted({m.step for m in manifests})) or "none"
        raise _refused(
            field,
            ref.text,
            f"{run.id} has no committed snapshot at step {ref.step}"
            + (f" of stage {stage!r}" if stage else "")
            + f"; committed steps: {steps}",
        )
    return run, found[0], store


def _by_id(
    catalog: Catalog, ref: SnapshotRef, field: str, store_url: str | None
) -> tuple[Run, Manifest, SnapshotStore]:
    """A snapshot id: looked for in the new run's store, then in every store the catalog uses."""
    from nodus.store import open_store

    urls = [store_url] if store_url else []
    urls += sorted({run.store for run in catalog.list_runs(limit=SCAN)} - set(urls))
    for url in urls:
        store = open_store(url)
        try:
            manifest = store.get(ref.snapshot_id or "")
        except (NotFoundError, StoreError):
            continue
        if manifest.role != "checkpoint":
            raise _refused(
                field, ref.text, f"it is {manifest.run}'s {manifest.role}, not a checkpoint"
            )
        try:
            run = catalog.get_run(manifest.run)
        except NotFoundError:
            raise _refused(
                field, ref.text, f"its run {manifest.run} is not in this catalog"
            ) from None
        _check_finished(run, field, ref.text)
        return run, manifest, store
    raise _refused(field, ref.text, f"no committed snapshot with this id in {', '.join(urls)}")


def _check_finished(run: Run, field: str, ref: str) -> None:
    if not run.phase.final:
        raise _refused(
            field,
            ref,
            f"the source run {run.id} is {run.phase}; it must have finished (SUCCEEDED, "
            "FAILED or CANCELLED) first (`nodus runs resume` continues the run itself)",
        )


def _run_named(catalog: Catalog, text: str, field: str, ref: str) -> tuple[Run, str | None]:
    """``RUN`` or ``RUN/STAGE`` (RUN an id or key; a key may hold ``/``): the run and stage."""
    candidates: list[tuple[str, str | None]] = [(text, None)]
    if "/" in text:
        head, _, tail = text.rpartition("/")
        candidates.append((head, tail))
    for name, stage in candidates:
        try:
            return catalog.get_run(name), stage
        except NotFoundError:
            continue
    raise _refused(field, ref, f"no run with id or key {text!r} in {catalog.path}")


def _refuse_unrecorded(catalog: Catalog, run: Run, step: int | None, field: str, ref: str) -> None:
    """A save the store never received cannot be started from: say so, not "no snapshot"."""
    why = unrecorded_step(catalog, run, step)
    if why:
        raise _refused(field, ref, why)


def _check_kinds(manifest: Manifest, mode: str, field: str, ref: str) -> None:
    """``full-state`` needs the training state, ``weights`` the weights (or the program's
    own files), still held: retention may have deleted one kind and kept the other."""
    if mode == FULL_STATE and not restorable.holds_training_state(manifest):
        raise _refused(
            field,
            ref,
            f"{manifest.id} (step {manifest.step}) no longer holds its training state (it "
            f"holds {', '.join(manifest.kinds) or 'nothing'}); branch from its weights with "
            "--from weights, or name a snapshot that keeps its state",
        )
    wanted = KIND_WEIGHTS if any(e.kind == KIND_WEIGHTS for e in manifest.files) else KIND_FILES
    if mode == MODE_WEIGHTS and wanted not in manifest.kinds:
        raise _refused(
            field, ref, f"{manifest.id} (step {manifest.step}) no longer holds its {wanted}"
        )


def _check_devices(
    catalog: Catalog, run: Run, stage: str, devices: int, field: str, ref: str
) -> None:
    """A full-state start needs the device count the parent's attempts had."""
    attempts = catalog.attempts(run.id, stage)
    recorded = next((a["devices"] for a in reversed(attempts) if a["devices"] is not None), None)
    if recorded is not None and recorded != devices:
        raise _refused(
            field,
            ref,
            f"{run.id} trained with {recorded} device(s) but this run would have {devices} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); a full-state "
            f"start needs {recorded} (a weights branch does not)",
        )


def _refused(field: str, ref: str, why: str) -> WorkloadError:
    return WorkloadError([Problem(field, why, ref, True)])


# --- branch holds --------------------------------------------------------------------------------


def referencing_runs(catalog: Catalog, run: Run) -> dict[Any, tuple[tuple[str, str], ...]]:
    """Unfinished runs started from a snapshot of ``run``: {snapshot id or step: ((id, mode),)}.

    A run's recorded parent names the snapshot by id. A run accepted before parents were
    recorded names it by its workload's ``resume_from``: ``RUN@STEP`` is keyed by its step
    (whichever attempt saved it), a snapshot id by the id; the caller matches either against
    each of ``run``'s snapshots.
    """
    found: dict[Any, tuple[tuple[str, str], ...]] = {}
    for other in catalog.unfinished_runs():  # asked at every rotation pass: never every run
        held = _held_by(catalog, other, run)
        if held is not None:
            key, mode = held
            found[key] = (*found.get(key, ()), (other.id, mode))
    return found


def _held_by(catalog: Catalog, other: Run, run: Run) -> tuple[Any, str] | None:
    """(snapshot id or step, mode) of ``run``'s snapshot that ``other`` starts from, or None."""
    parent = Parent.from_dict(other.parent)
    if parent is not None:
        return (parent.snapshot, parent.mode) if parent.run == run.id else None
    source = other.workload.get("resume_from")
    if not source:
        return None
    try:
        ref = parse_ref(source)
    except UsageError:
        return None  # accepted by an older nodus; it names nothing this one can find
    if ref.snapshot_id is not None:
        return ref.snapshot_id, FULL_STATE
    if _names(catalog, ref.run or "", run):
        return ref.step, FULL_STATE
    return None


def _names(catalog: Catalog, text: str, run: Run) -> bool:
    """Whether ``RUN`` or ``RUN/STAGE`` (RUN an id or key; a key may hold ``/``) is ``run``."""
    candidates = [text]
    if "/" in text:
        candidates.append(text.rpartition("/")[0])
    for candidate in candidates:
        try:
            return catalog.get_run(candidate).id == run.id
        except NotFoundError:
            continue
    return False
