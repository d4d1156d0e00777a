"""A folder that is both the run's outputs and its checkpoint path, under tight retention.

The counter (directory contract) saves ``state/checkpoint-<step>`` folders, which rotation
deletes kind by kind, and the workload names ``state`` among its outputs too, so the outputs
snapshot shares its blobs with the checkpoints (content addressing). Rotation, `nodus gc` and a
remote store's staging must never free one of them while the outputs name it (issue 39.3).
"""

from __future__ import annotations

import json

import pytest
from runner_helpers import Project

from nodus.store import open_store
from nodus.testing.counter import expected_value

pytestmark = pytest.mark.slow

TIGHT = (
    '[continuity]\ncheckpoint_paths = ["state"]\n'
    "[execution]\nkeep_recoverable = 1\nkeep_adapters = 1\nmax_recoveries = 10\n"
)


def _write(project: Project) -> None:
    project.write(steps=60, save_every=5, sleep=0.01, extra_args=("--keep", "20"), body=TIGHT)
    text = project.file.read_text().replace('outputs = ["out"]', 'outputs = ["out", "state"]')
    project.file.write_text(text)


def _outputs_whole(store, run_id: str, tmp_path) -> None:
    (outputs,) = store.list(run=run_id, role="outputs")
    paths = {e.path for e in outputs.files}
    assert len([p for p in paths if p.startswith("state/")]) >= 10, sorted(paths)
    assert store.check(outputs.id) == []
    target = tmp_path / "outputs"
    store.restore(outputs.id, str(target))  # verifies every file
    assert (target / "out" / "result.json").exists()
    report = store.verify()
    assert report.sound, report.lines()


def _rotated(run: dict) -> None:
    types = [e["type"] for e in run["events"]]
    assert "snapshot_kind_deleted" in types, "retention deleted nothing: the test proves nothing"
    assert "rotation_failed" not in types and "outputs_failed" not in types


def test_rotating_a_folder_that_is_also_the_outputs_keeps_every_output_file(project, tmp_path):
    _write(project)
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_id = proc.stderr.split("accepted ")[1].split()[0]
    _rotated(project.get(run_id))
    assert project.nodus("gc").returncode == 0  # the run finished: its held save may go too
    store = open_store("file://" + str(project.home / "store"))
    _outputs_whole(store, run_id, tmp_path)
    got = project.nodus("runs", "outputs", run_id, "--to", str(tmp_path / "user"))
    assert got.returncode == 0, got.stdout + got.stderr
    result = json.loads((tmp_path / "user" / "out" / "result.json").read_text())
    assert result == {"steps": 60, "value": expected_value(60)}


def test_the_same_against_a_remote_store_through_staging(project, s3_server, tmp_path):
    url = f"s3://{s3_server.bucket()}/runs"
    _write(project)
    proc = project.nodus("--store", url, "run", "workload.toml", env=s3_server.env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_id = proc.stderr.split("accepted ")[1].split()[0]
    _rotated(project.get(run_id))
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    _outputs_whole(open_store(url), run_id, tmp_path)


def test_runs_delete_of_one_run_keeps_every_blob_another_run_names(project, tmp_path):
    """The counter is deterministic: two runs of it store the same files, so every blob of the
    second run is one of the first's too. Deleting the first run frees none of them."""
    _write(project)
    ids = []
    for _ in range(2):
        proc = project.nodus("run", "workload.toml")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        ids.append(proc.stderr.split("accepted ")[1].split()[0])
    store = open_store("file://" + str(project.home / "store"))
    first = {e.hash for m in store.list(run=ids[0], role=None) for e in m.held_files()}
    second = {e.hash for m in store.list(run=ids[1], role=None) for e in m.held_files()}
    assert len(first & second) >= 10  # they share most of what they hold

    deleted = project.nodus("runs", "delete", ids[0])
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert project.nodus("gc").returncode == 0
    store = open_store(store.url)
    assert store.list(run=ids[0], role=None) == []
    for manifest in store.list(run=ids[1], role=None):
        assert store.check(manifest.id) == [], manifest.id
    _outputs_whole(store, ids[1], tmp_path)
