"""Rotation beside a running capture: a deletion deferred by it, and its snapshot removed before
the retry (it lost its last kind, or `nodus gc` / `runs delete` took it meanwhile).

Real store, real catalog, the attempt's real rotation worker; the running capture is the
store's own capture intent, as a capture writes it.
"""

from __future__ import annotations

from pathlib import Path

from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Catalog
from nodus.runner.upkeep.rotation import Rotation
from nodus.schemas.loader import resolve_file
from nodus.store import keys, open_store
from nodus.store.manifest import SnapshotInfo
from nodus.store.sweep import write_intent
from polling import wait_for

WORKLOAD = """name = "rotation"
command = ["python", "-c", "pass"]
[execution]
keep_recoverable = 1
keep_adapters = 1
"""


def _commit(store, copy: Path, run_id: str, step: int) -> str:
    folder = copy / "state" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights %d" % step)  # kind: weights
    (folder / "optimizer.pt").write_bytes(b"state %d" % step)  # kind: state
    info = SnapshotInfo(run=run_id, stage="main", attempt=1, step=step)
    return store.capture(str(copy), [f"state/checkpoint-{step}"], info=info).id


def _run(tmp_path):
    """A run's resolved workload, store, catalog and id, and the folder its commits come from."""
    (tmp_path / "workload.toml").write_text(WORKLOAD)
    resolved = resolve_file(tmp_path / "workload.toml")
    store = open_store(f"file://{tmp_path / 'store'}")
    catalog = Catalog(str(tmp_path / "home"))
    run_id = catalog.create_run(
        name="rotation",
        workload=resolved.to_dict(),
        store=f"file://{tmp_path / 'store'}",
        key=None,
        lock_name="rotation",
        stage_names=["main"],
    )
    return resolved, store, catalog, run_id, tmp_path / "copy"


def test_a_deferred_deletion_whose_snapshot_is_gone_leaves_rotation_working(tmp_path):
    resolved, store, catalog, run_id, copy = _run(tmp_path)
    ids = [_commit(store, copy, run_id, step) for step in (1, 2, 3, 4)]
    rotation = Rotation(AttemptContext(store, catalog, run_id, resolved.stages[0], 1))

    # A capture is running: the pass marks the kinds of steps 1 and 2, their frees wait.
    write_intent(store.storage, "ckpt_running")
    rotation.request()
    wait_for(lambda: len(_events(catalog, run_id, "snapshot_kind_deleted")) == 4, "the pass")
    assert {m.id for m in store.list(run=run_id)} == set(ids[2:])

    # The capture ends; step 1 goes whole before the worker retries (`nodus runs delete`).
    store.storage.delete(keys.intent_key("ckpt_running"))
    store.delete(ids[0], reason="expiry")
    ids.append(_commit(store, copy, run_id, 5))
    rotation.request()
    rotation.close()

    assert not _events(catalog, run_id, "rotation_failed")
    # The pass went on: step 2's blobs were freed, and step 3 was rotated away after step 5.
    assert [m.step for m in store.list(run=run_id)] == [4, 5]
    assert not store.pending_deletions()


def _events(catalog: Catalog, run_id: str, type_: str) -> list[dict]:
    return [e for e in catalog.events(run_id) if e["type"] == type_]


def test_a_hurried_close_finishes_what_was_asked_and_leaves_an_idle_worker_to_end(tmp_path):
    """A recovery closes its attempt's rotation in a hurry: a pass asked for still runs whole
    before the close returns; a worker with nothing to do is not waited for, and ends alone."""
    resolved, store, catalog, run_id, copy = _run(tmp_path)
    rotation = Rotation(AttemptContext(store, catalog, run_id, resolved.stages[0], 1))
    for step in (1, 2, 3):
        _commit(store, copy, run_id, step)
    rotation.request()
    rotation.close(hurry=True)  # asked for: done before the close returns
    assert [m.step for m in store.list(run=run_id)] == [2, 3]  # as the first test keeps two

    idle = Rotation(AttemptContext(store, catalog, run_id, resolved.stages[0], 2))
    idle.request()
    wait_for(lambda: not idle._passing and not idle._asked, "the pass")
    idle.close(hurry=True)
    wait_for(lambda: not idle._thread.is_alive(), "the idle worker's end", timeout=10)
    assert not _events(catalog, run_id, "rotation_failed")
