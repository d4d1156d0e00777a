"""The catalog scan behind ``branch`` holds: unfinished runs started from a run's snapshots."""

from __future__ import annotations

from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.phases import Phase
from nodus.runner.upkeep.lineage import referencing_runs
from run_phases import move_to


def _run(catalog: Catalog, key: str, resume_from: str | None = None, phase=Phase.RUNNING) -> str:
    workload = {"name": key, "resume_from": resume_from, "stages": [{"name": "main"}]}
    run_id = catalog.create_run(
        name=key, workload=workload, store="memory://", key=key, lock_name=key, stage_names=["main"]
    )
    move_to(catalog, run_id, phase)
    return run_id


def test_unfinished_runs_that_start_from_a_snapshot_of_the_run_are_found(tmp_path):
    catalog = Catalog(str(tmp_path))
    parent = _run(catalog, "team/base")  # a key may hold "/"
    by_step = _run(catalog, "by-step", "team/base@20")
    by_stage = _run(catalog, "by-stage", f"{parent}/main@30")
    by_id = _run(catalog, "by-id", "ckpt_0123456789abcdef")
    _run(catalog, "finished", "team/base@20", phase=Phase.SUCCEEDED)  # holds nothing any more
    _run(catalog, "elsewhere", "by-step@20")  # another run's snapshot
    found = referencing_runs(catalog, catalog.get_run(parent))
    assert found == {
        20: ((by_step, "full-state"),),
        30: ((by_stage, "full-state"),),
        "ckpt_0123456789abcdef": ((by_id, "full-state"),),
    }
