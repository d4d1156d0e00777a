"""Acceptance: a workload file becomes a run with its resolution and its source stored.

From here on the run never looks at the user's files again: every attempt (first, retry,
recovery, resume) starts from the source captured now and reads the resolution stored now, so a
file edited while a run is going cannot change what the run does. Likewise each stage's
executable is found now, on the caller's PATH, and every attempt runs that one
(:mod:`nodus.runner.workspace.launch`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus.errors import UsageError
from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.locks import lock_name_for
from nodus.runner.catalog.run_ids import new_run_id
from nodus.runner.remote.record import publish_accepted
from nodus.runner.upkeep.lineage import Parent, Source, inherited_stages
from nodus.runner.workspace import launch, source
from nodus.schemas.resolved import ResolvedWorkload
from nodus.schemas.units import human_bytes

if TYPE_CHECKING:
    from nodus.store import SnapshotStore


@dataclass(frozen=True)
class Accepted:
    run_id: str
    sources: tuple[source.Source, ...]  # one per code folder, as measured before the copy
    shared_from: str | None = None  # a branch: the run whose stored source it runs

    @property
    def summary(self) -> str:
        """What the acceptance line says of the source: ``source 12.0 KiB in 4 files``."""
        if self.shared_from is not None:
            return f"the source of {self.shared_from}"
        size = human_bytes(sum(item.bytes for item in self.sources))
        files = sum(item.files for item in self.sources)
        return f"source {size} in {files} file{'' if files == 1 else 's'}"


def accept(
    catalog: Catalog,
    store: SnapshotStore,
    store_url: str,
    workload: ResolvedWorkload,
    key: str | None,
    home: str,
    environ: Mapping[str, str] = os.environ,
    say: Callable[[str], None] | None = None,
    parent: Parent | None = None,
) -> Accepted:
    """Capture each stage's code folder and record the run.

    ``environ`` is the caller's environment: its PATH is where the stages' executables are found.
    ``say`` hears about a source large enough to surprise, before it is copied. ``parent`` is
    the snapshot the run starts from (``resume_from``), checked by the caller.
    """
    from nodus.store.manifest import SnapshotInfo

    launches = launch.resolve_stages(workload.stages, environ)  # refuse before capturing
    found = source.sources(workload.stages, source.private_folders(home, store_url))
    refused = source.refusals(found, workload.stages)
    if refused:
        raise UsageError("\n".join(refused))
    for item in found:
        for warning in item.warnings():
            if say is not None:
                say(warning)
    for warning in source.credential_warnings(workload.stages):
        if say is not None:
            say(warning)
    run_id = new_run_id()
    snapshots: dict[str, str] = {}  # code folder -> source snapshot id (stages often share one)
    for item in found:
        info = SnapshotInfo(run=run_id, stage=None, attempt=0, step=None, role="source")
        manifest = store.capture(item.code, ["."], info=info, excludes=item.excludes)
        snapshots[item.code] = manifest.id
    _record(
        catalog,
        run_id,
        workload,
        store_url,
        key,
        launches,
        {stage.name: snapshots[stage.code] for stage in workload.stages},
        parent,
    )
    details = {
        "snapshots": sorted(set(snapshots.values())),
        "bytes": sum(item.bytes for item in found),
        "files": sum(item.files for item in found),
    }
    catalog.add_event(run_id, "source_captured", details)
    publish_accepted(catalog, store, run_id)  # from now on the store alone can recover it
    return Accepted(run_id, tuple(found))


def accept_branch(
    catalog: Catalog, source: Source, workload: ResolvedWorkload, key: str | None
) -> Accepted:
    """Record a branch of ``source``: the parent's own source snapshots and executables, with
    ``workload`` (the parent's resolution and the branch's changes). Nothing is captured, and
    the run, its stages and its parent are one catalog transaction: a branch killed on the way
    either does not exist or exists whole."""
    run_id = new_run_id()
    sources = {stage["name"]: stage["source_snapshot"] for stage in source.run.stages}
    _record(
        catalog,
        run_id,
        workload,
        source.run.store,
        key,
        source.run.launch or {},
        sources,
        source.parent,
    )
    publish_accepted(catalog, source.store, run_id)
    return Accepted(run_id, (), shared_from=source.run.id)


def _record(
    catalog: Catalog,
    run_id: str,
    workload: ResolvedWorkload,
    store_url: str,
    key: str | None,
    launches: dict[str, Any],
    sources: dict[str, str],
    parent: Parent | None,
) -> None:
    resolved = workload.to_dict()
    catalog.create_run(
        run_id=run_id,
        name=workload.name,
        workload=resolved,
        store=store_url,
        key=key,
        lock_name=lock_name_for(run_id, key),
        stage_names=[stage.name for stage in workload.stages],
        launch=launches,
        parent=parent.to_dict() if parent is not None else None,
        sources=sources,
        inherited=inherited_stages(resolved, parent) if parent is not None else (),
    )
    if parent is not None:
        catalog.add_event(run_id, "started_from", parent.to_dict())
