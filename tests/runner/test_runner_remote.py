"""Runs against a remote store: a real S3 server on loopback (moto) reached through s3fs.

Each capture lands in the local staging store first and is uploaded in the background; these
tests run the shipped counter through the real CLI and look at what the remote store holds,
what the run recorded, and what `runs get` shows, including while the server is down.
"""

from __future__ import annotations

import json

from runner_helpers import Project

from nodus.store import open_store
from nodus.testing.counter import expected_value


def remote(project: Project, server, url: str, *args: str, **kwargs):
    """`nodus --store URL ARGS` with the server's endpoint and credentials."""
    return project.nodus("--store", url, *args, env=server.env, **kwargs)


def open_remote(url: str):
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return open_store(url)


def run_id_of(proc) -> str:
    return proc.stderr.split("accepted ")[1].split()[0]


def events(run: dict, type_: str) -> list[dict]:
    return [e for e in run["events"] if e["type"] == type_]


def outputs_result(store, run_id: str, tmp_path) -> dict:
    manifests = store.list(run=run_id, role="outputs")
    assert manifests, f"{run_id} stored no outputs"
    target = tmp_path / "outputs"
    store.restore(manifests[-1].id, str(target))
    return json.loads((target / "out" / "result.json").read_text())


def staged_manifests(project: Project) -> list[str]:
    staging = project.home / "staging"
    return [p.name for p in staging.glob("*/snapshots/*.json")]


def test_a_run_against_a_remote_store_uploads_every_snapshot_and_empties_staging(
    project, s3_server, tmp_path
):
    url = f"s3://{s3_server.bucket()}/runs"
    project.write(steps=30, save_every=10, sleep=0.02)
    proc = remote(project, s3_server, url, "run", "workload.toml")
    assert proc.returncode == 0, proc.stderr
    run_id = run_id_of(proc)

    store = open_remote(url)
    assert outputs_result(store, run_id, tmp_path) == {"steps": 30, "value": expected_value(30)}
    listed = store.list(run=run_id)
    assert listed and listed[-1].step == 30  # the final save, stored remotely
    for manifest in listed:
        assert store.check(manifest.id) == []
    run = project.get(run_id)
    committed = {e["snapshot"] for e in events(run, "snapshot_committed")}
    staged = {e["snapshot"] for e in events(run, "snapshot_staged")}
    assert {m.id for m in listed} <= committed <= staged
    assert events(run, "outputs_committed")
    assert staged_manifests(project) == []  # every staged copy was dropped once uploaded
    assert run["upload"]["uploading"] is None and run["upload"]["waiting"] == 0
    assert run["unrecorded"] == []
    # Nothing was written into the local default store.
    assert not (project.home / "store" / "snapshots").exists()
