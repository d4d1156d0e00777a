"""``nodus gc`` and ``nodus runs delete``: what leaves the store after a run, and when.

Rotation (:mod:`nodus.runner.upkeep.rotation`) bounds a store while a run trains. What is left
when the run has finished is collected here, from cron or by hand:

0. **The run's model, caught up.** A SUCCEEDED run whose runner was killed before it registered
   the run's model gets it registered now
   (:func:`nodus.runner.upkeep.registration.catch_up`), before anything expires.
1. **Expiry.** A finished run's snapshots expire ``retention_days`` after it finished (per stage,
   as resolved), unless something holds them: :func:`nodus.retention.policy.expiry` decides, over
   the holds :mod:`nodus.retention.holds` finds (the run's model, pins, epoch saves, runs branched
   from it). Sources and outputs are never expired: they go with the run.
2. **Interrupted deletions** (a process killed between marking a kind and freeing its blobs) are
   finished by the store, which alone executes deletions.
3. **Unreferenced blobs** older than the grace period are swept, with the store's handshake
   against running captures.

Every step is idempotent and safe beside running captures and another ``nodus gc``: a collection
killed anywhere is completed by the next. ``runs delete`` removes the store's objects first and
the catalog's rows last, so a deletion killed half way is finished by running it again, and
nothing is ever left in the store that no catalog row leads to (Determined PR #7967's leak).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from nodus.errors import NodusError, NotFoundError, UsageError, redacted
from nodus.retention import holds as retention_holds
from nodus.retention.policy import Deletion, expiry
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.locks import RunLock
from nodus.runner.upkeep.lineage import referencing_runs
from nodus.runner.upkeep.registration import catch_up
from nodus.schemas import defaults
from nodus.store import GcReport, Manifest, SnapshotStore, open_store
from nodus.store.deleting import BLOB_GC_GRACE_S
from nodus.store.run_records import RunRecords

__all__ = ["Collection", "collect", "delete_run", "run_usage"]


@dataclass
class Collection:
    """What one ``nodus gc`` removed (or, with ``dry_run``, would remove): the ``--json`` shape."""

    dry_run: bool
    registered: list[dict[str, Any]] = field(default_factory=list)  # run models caught up
    expired: list[dict[str, Any]] = field(default_factory=list)
    finished_deletions: int = 0
    removed_snapshots: int = 0
    deleted_blobs: int = 0
    freed_bytes: int = 0
    deferred: list[str] = field(default_factory=list)  # stores whose sweep waited for captures
    errors: list[str] = field(default_factory=list)  # stores that could not be collected
    stores: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "stores": self.stores,
            "registered": self.registered,
            "expired": self.expired,
            "finished_deletions": self.finished_deletions,
            "removed_snapshots": self.removed_snapshots,
            "deleted_blobs": self.deleted_blobs,
            "freed_bytes": self.freed_bytes,
            "deferred": self.deferred,
            "errors": self.errors,
        }


def collect(
    catalog: Catalog,
    default_store: str,
    *,
    now: float | None = None,
    dry_run: bool = False,
    grace_s: float = BLOB_GC_GRACE_S,
) -> Collection:
    """Expire, finish interrupted deletions and sweep blobs in every store the catalog uses."""
    now = time.time() if now is None else now
    report = Collection(dry_run=dry_run)
    runs = catalog.list_runs(limit=None)
    for url in _store_urls(default_store, runs):
        report.stores.append(url)
        try:
            store = open_store(url)
            for run in runs:
                if run.store == url and run.phase.terminal:
                    run = catalog.get_run(run.id)
                    manifests = store.list(run=run.id)
                    if not dry_run:
                        _register(catalog, store, run, manifests, report)
                    _expire(catalog, store, run, manifests, now, dry_run, report)
            _sweep(store, dry_run, grace_s, report)
        except NodusError as error:  # an unreachable store must not stop the others
            report.errors.append(redacted(f"{url}: {error}"))  # a URL's password masked
    return report


def _store_urls(default_store: str, runs: Iterable[Run]) -> list[str]:
    urls = [default_store]
    urls += sorted({run.store for run in runs} - {default_store})
    return urls


def _register(
    catalog: Catalog, store: SnapshotStore, run: Run, manifests: list[Manifest], report: Collection
) -> None:
    """A succeeded run's model that its runner never registered (killed just before)."""
    try:
        model = catch_up(catalog, store, run, "gc", manifests)
    except NodusError as error:  # one run's registration must not stop the collection
        report.errors.append(f"{run.id}: its model could not be registered: {error}")
        return
    if model is not None:
        report.registered.append({"run": run.id, "model": model.ref, "snapshot": model.snapshot})


def _expire(
    catalog: Catalog,
    store: SnapshotStore,
    run: Run,
    manifests: list[Manifest],
    now: float,
    dry_run: bool,
    report: Collection,
) -> None:
    if not run.phase.terminal:
        return  # a run that may still continue keeps everything a resume needs
    for stage, deletion in _expired(catalog, store, run, manifests, now):
        report.expired.append({"run": run.id, **_describe(deletion)})
        if not dry_run:
            _fold(
                report,
                store,
                store.delete_kind(deletion.snapshot_id, deletion.kind, reason="expiry"),
            )
            details = {**_describe(deletion), "reason": "expiry"}
            catalog.add_event(run.id, "snapshot_kind_deleted", details, stage=stage)


def _expired(
    catalog: Catalog, store: SnapshotStore, run: Run, manifests: list[Manifest], now: float
) -> list[tuple[str, Deletion]]:
    """(stage, deletion) of every kind of ``run``'s checkpoints (``manifests``) that has
    expired by ``now``."""
    held = retention_holds.run_holds(
        run, manifests, retention_holds.HoldIndex(store), referencing_runs(catalog, run)
    )
    deletions = []
    for stage in run.workload.get("stages", ()):
        days = stage.get("execution", {}).get("retention_days", defaults.RETENTION_DAYS)
        ours = [m for m in manifests if m.stage == stage["name"]]
        found = expiry(ours, held, finished_at=run.finished_at, retention_days=days, now=now)
        deletions += [(stage["name"], deletion) for deletion in found]
    return deletions


def _sweep(store: SnapshotStore, dry_run: bool, grace_s: float, report: Collection) -> None:
    if dry_run:
        report.finished_deletions += len(store.pending_deletions())
        for _key, size in store.unreferenced_blobs(grace_s):
            report.deleted_blobs += 1
            report.freed_bytes += size
        return
    _fold(report, store, store.finish_deletions())
    _fold(report, store, store.gc_blobs(grace_s))


def _fold(report: Collection, store: SnapshotStore, done: GcReport) -> None:
    """Add what one store step did to the collection's report."""
    report.finished_deletions += done.finished_deletions
    report.removed_snapshots += done.removed_snapshots
    report.deleted_blobs += done.deleted_blobs
    report.freed_bytes += done.freed_bytes
    if done.deferred and redacted(store.url) not in report.deferred:
        report.deferred.append(redacted(store.url))


def _describe(deletion: Deletion) -> dict[str, Any]:
    return {"snapshot": deletion.snapshot_id, "step": deletion.step, "kind": deletion.kind}


# --- nodus runs delete ---------------------------------------------------------------------------


def delete_run(catalog: Catalog, home: str, ref: str, say: Callable[[str], None]) -> dict[str, Any]:
    """Remove a finished run's snapshots, outputs, source, working folders and catalog rows.

    Refused while the run may still move (its phase is not terminal, or a runner holds its
    lock), while an unfinished run started from one of its snapshots, and while a snapshot of
    it is pinned. Store first, rows last: a deletion killed half way is finished by running it
    again.
    """
    run = catalog.get_run(ref)
    if not run.phase.terminal:
        raise UsageError(
            f"{run.id} is {run.phase.value}: only a finished run is deleted "
            f"(cancel it first: nodus runs cancel {run.id})"
        )
    lock = RunLock(home, run.lock_name, run.key or run.id).acquire()
    try:
        store = open_store(run.store)
        manifests = store.list(run=run.id, role=None)
        _refuse_held(catalog, store, run, manifests)
        freed = 0
        for manifest in manifests:
            freed += store.delete(manifest.id, reason="run deleted").freed_bytes
        shutil.rmtree(os.path.join(home, defaults.WORK_DIR, run.id), ignore_errors=True)
        RunRecords(store.storage).delete(run.id, run.key)  # no machine recovers it any more
        catalog.delete_run(run.id)
    finally:
        lock.release()
    say(f"deleted {run.id}: {len(manifests)} snapshot(s), {freed} bytes freed")
    return {"id": run.id, "deleted_snapshots": len(manifests), "freed_bytes": freed}


def _refuse_held(
    catalog: Catalog, store: SnapshotStore, run: Run, manifests: list[Manifest]
) -> None:
    """A run another run still needs, or one the user pinned, is not deleted behind anyone."""
    for key, holders in referencing_runs(catalog, run).items():
        for holder, _mode in holders:
            raise UsageError(
                f"{run.id} is still needed: {holder} started from its snapshot {key} and has "
                f"not finished; delete it after {holder} finishes (or cancel {holder})"
            )
    index = retention_holds.HoldIndex(store)
    pinned = [m for m in manifests if index.has(m.id, retention_holds.PIN)]
    if pinned:
        named = ", ".join(f"{m.id} (step {m.step})" for m in pinned)
        raise UsageError(
            f"{run.id} has pinned snapshots: {named}; release them first "
            f"(nodus snapshots release ID) to delete the run"
        )


# --- the run's bytes -----------------------------------------------------------------------------


def run_usage(store: SnapshotStore, run_id: str) -> dict[str, Any]:
    """The bytes a run's snapshots hold in the store, each blob counted once (``runs get``),
    and how many of its snapshots are of each role (``checkpoint``, ``source``, ``outputs``)."""
    try:
        manifests = store.list(run=run_id, role=None)
    except NotFoundError:
        manifests = []
    blobs: dict[str, int] = {}
    roles: dict[str, int] = {}  # what the snapshots are: checkpoints, the source, outputs
    for manifest in manifests:
        roles[manifest.role] = roles.get(manifest.role, 0) + 1
        for entry in manifest.held_files():
            if not entry.is_link:
                blobs[entry.hash] = entry.size
    return {"snapshots": len(manifests), "bytes": sum(blobs.values()), "roles": roles}
