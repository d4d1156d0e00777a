"""Committed manifests as a store would read them back, built without a run (``retention_helpers``).

The policies are pure, so their tests hand them real :class:`nodus.store.Manifest` values: one
file per kind of a Trainer checkpoint (or the single ``files`` kind of a directory-contract
program), with ``deleting`` standing for the kinds retention already marked.
"""

from __future__ import annotations

import itertools

from nodus.runner.catalog.core import Run
from nodus.runner.catalog.phases import Phase
from nodus.store.manifest import FileEntry, Manifest

HF = ("weights", "state", "files")
DIRECTORY = ("files",)
_FILE_OF = {"weights": "model.safetensors", "state": "optimizer.pt", "files": "nodus-identity.json"}
_ids = itertools.count(1)


def snap(
    step: int | None,
    *,
    attempt: int = 1,
    kinds: tuple[str, ...] = HF,
    stage: str = "main",
    run: str = "run_a",
    epoch: float | None = None,
    deleted: tuple[str, ...] = (),
    role: str = "checkpoint",
    created: float | None = None,
    name: str | None = None,
) -> Manifest:
    """One committed snapshot holding ``kinds`` (``deleted`` ones marked by retention)."""
    number = next(_ids)
    folder = f"state/checkpoint-{step}"
    files = tuple(
        FileEntry(f"{folder}/{_FILE_OF[kind]}", 100, 0o644, f"{number:016x}{i:016x}", kind)
        for i, kind in enumerate(kinds)
    )
    return Manifest(
        id=name or f"ckpt_{number:016x}",
        run=run,
        stage=stage,
        attempt=attempt,
        step=step,
        epoch=epoch,
        metrics={},
        role=role,
        created=float(number) if created is None else created,
        files=files,
        deleting=frozenset(deleted),
    )


def run_of(
    phase: str = "RUNNING",
    *,
    stages: tuple[tuple[str, str], ...] = (("main", "RUNNING"),),
    save_each_epoch: bool = False,
    resume_from: str | None = None,
    run_id: str = "run_a",
    key: str | None = None,
) -> Run:
    """The catalog's record of a run, with ``stages`` as (name, phase)."""
    execution = {"save_each_epoch": save_each_epoch}
    workload = {
        "name": "w",
        "resume_from": resume_from,
        "stages": [{"name": name, "execution": execution} for name, _phase in stages],
    }
    return Run(
        id=run_id,
        key=key,
        name="w",
        workload=workload,
        store="memory://",
        lock_name=run_id,
        phase=Phase(phase),
        exit_status=None,
        message=None,
        runner_pid=None,
        runner_host=None,
        created_at="2026-12-01T00:00:00.000Z",
        updated_at="2026-12-01T00:00:00.000Z",
        finished_at=None,
        stages=[{"name": name, "phase": phase} for name, phase in stages],
    )
