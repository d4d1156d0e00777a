"""Acceptance: a workload file becomes a run with its resolution and its source stored.

From here on the run never looks at the user's files again: every attempt (first, retry,
recovery, resume) starts from the source captured now and reads the resolution stored now, so a
file edited while a run is going cannot change what the run does. Likewise each stage's
executable is found now, on the caller's PATH, and every attempt runs that one
(:mod:`nodus.runner.launch`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nodus.errors import UsageError
from nodus.runner import launch
from nodus.runner.catalog import Catalog, new_run_id
from nodus.runner.locks import lock_name_for
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedWorkload


def source_excludes(code: str, private: tuple[str, ...] = ()) -> list[str]:
    """``.git``, ``.nodus``, the patterns of an optional ``.nodusignore`` (# comments), and
    nodus's own folders (``private``: home, store) when they lie inside the code folder."""
    patterns = list(defaults.SOURCE_EXCLUDES)
    for folder in private:
        relative = os.path.relpath(os.path.realpath(folder), os.path.realpath(code))
        if relative != "." and not relative.startswith(".."):
            # A live catalog and store must never be captured into themselves.
            patterns.append(relative.replace(os.sep, "/"))
    try:
        with open(os.path.join(code, defaults.IGNORE_FILE), encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line and not line.startswith("#"):
                    patterns.append(line)
    except FileNotFoundError:
        pass
    return patterns


def accept(
    catalog: Catalog,
    store: Any,
    store_url: str,
    workload: ResolvedWorkload,
    key: str | None,
    home: str,
    environ: Mapping[str, str] = os.environ,
) -> str:
    """Capture each stage's code folder and record the run; returns the run id.

    ``environ`` is the caller's environment: its PATH is where the stages' executables are found.
    """
    from nodus.store.manifest import SnapshotInfo

    launches = launch.resolve_stages(workload.stages, environ)  # refuse before capturing
    run_id = new_run_id()
    sources: dict[str, str] = {}  # code folder -> source snapshot id (stages often share one)
    for stage in workload.stages:
        if stage.code in sources:
            continue
        if not os.path.isdir(stage.code):
            raise UsageError(f"stage {stage.name!r}: code folder {stage.code} does not exist")
        info = SnapshotInfo(run=run_id, stage=None, attempt=0, step=None, role="source")
        private = (
            (home, store_url[len("file://") :]) if store_url.startswith("file://") else (home,)
        )
        excludes = source_excludes(stage.code, private)
        manifest = store.capture(stage.code, ["."], info=info, excludes=excludes)
        sources[stage.code] = manifest.id
    catalog.create_run(
        run_id=run_id,
        name=workload.name,
        workload=workload.to_dict(),
        store=store_url,
        key=key,
        lock_name=lock_name_for(run_id, key),
        stage_names=[stage.name for stage in workload.stages],
        launch=launches,
    )
    for stage in workload.stages:
        catalog.set_stage(run_id, stage.name, source_snapshot=sources[stage.code])
    catalog.add_event(run_id, "source_captured", {"snapshots": sorted(set(sources.values()))})
    return run_id
