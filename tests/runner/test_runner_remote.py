"""Runs against a remote store: a real S3 server on loopback (moto) reached through s3fs.

Each capture lands in the local staging store first and is uploaded in the background; these
tests run the shipped counter through the real CLI and look at what the remote store holds,
what the run recorded, and what `runs get` shows, including while the server is down.
"""

from __future__ import annotations

import json
import os
import signal
from contextlib import contextmanager

from runner_helpers import Project

from nodus.store import open_store
from nodus.testing.counter import expected_value
from polling import wait_for


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


@contextmanager
def background(project: Project, server, url: str, key: str, **env: str):
    """`nodus --store URL run workload.toml --key KEY` in the background; killed if the test
    fails before it ended (it would otherwise retry its uploads long after the server)."""
    runner = project.start(
        "--store", url, "run", "workload.toml", "--key", key, env={**server.env, **env}
    )
    try:
        yield runner
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()


def catalog_events(project: Project, key: str, type_: str) -> list[dict]:
    from nodus.errors import NotFoundError

    catalog = project.catalog()
    try:
        run = catalog.get_run(key)
    except NotFoundError:
        return []  # not accepted yet
    return [e for e in catalog.events(run.id) if e["type"] == type_]


def test_a_store_outage_mid_upload_loses_nothing_and_never_stalls_the_program(
    project, s3_server, tmp_path
):
    url = f"s3://{s3_server.bucket()}/runs"
    # 1 MB of state a save, each one different: every save is an upload of its own.
    project.write(
        steps=120,
        save_every=5,
        sleep=0.05,
        extra_args=("--state-bytes", str(1 << 20)),
        gated=True,
    )
    with background(project, s3_server, url, "outage") as runner:
        wait_for(lambda: catalog_events(project, "outage", "snapshot_committed"), what="an upload")
        staged_during, committed_during = _outage(project, s3_server)
        project.done_killing()  # the outage is over: the steps left run at full speed
        runner.communicate(timeout=180)
    assert runner.returncode == 0
    run = project.get("outage")
    assert run["phase"] == "SUCCEEDED" and run["unrecorded"] == []
    assert staged_during >= 4
    store = open_remote(url)
    listed = {m.id: m for m in store.list(run=run["id"])}
    committed = [e["snapshot"] for e in events(run, "snapshot_committed")]
    assert len(committed) > committed_during  # uploads resumed once the server was back
    # Nothing committed is lost: every commit the run recorded is in the store (or was
    # deleted by rotation, which says so), and each listed snapshot restores and verifies.
    rotated = {e["snapshot"] for e in events(run, "snapshot_kind_deleted")}
    assert set(committed) <= set(listed) | rotated
    for manifest in listed.values():
        assert store.check(manifest.id) == []
    assert max(m.step for m in listed.values()) == 120
    assert outputs_result(store, run["id"], tmp_path) == {
        "steps": 120,
        "value": expected_value(120),
    }
    assert staged_manifests(project) == []


def _outage(project: Project, server) -> tuple[int, int]:
    """Stop the server until the runner staged 4 more captures; (staged, committed) meanwhile."""
    server.stop()
    staged_before = len(catalog_events(project, "outage", "snapshot_staged"))
    # While the store is down the program trains on and the runner keeps capturing locally:
    # a capture loop that waited on the network would stage at most the one it was in.
    wait_for(
        lambda: len(catalog_events(project, "outage", "snapshot_staged")) >= staged_before + 4,
        what="captures while the store is down",
    )
    committed = len(catalog_events(project, "outage", "snapshot_committed"))
    staged = len(catalog_events(project, "outage", "snapshot_staged")) - staged_before
    server.start()
    return staged, committed


def test_a_store_down_when_the_stage_ends_leaves_its_saves_unrecorded(project, s3_server):
    url = f"s3://{s3_server.bucket()}/runs"
    project.write(
        steps=60,
        save_every=10,
        sleep=0.05,
        body='[execution]\nunrecorded_retry = "3s"\n',
        gated=True,
    )
    # botocore's own retries of a refused connection would only slow the test: nodus retries.
    with background(project, s3_server, url, "down", AWS_MAX_ATTEMPTS="1") as runner:
        wait_for(lambda: catalog_events(project, "down", "snapshot_committed"), what="an upload")
        s3_server.stop()
        project.done_killing()  # the store is down: the steps left run at full speed
        runner.communicate(timeout=180)  # retries for 3 s after the stage ended, then ends
    s3_server.start()  # `runs get` reads the store's totals

    run = project.get("down")
    staged = {e["snapshot"]: e["step"] for e in events(run, "snapshot_staged")}
    committed = {e["snapshot"] for e in events(run, "snapshot_committed")}
    unrecorded = [save for save in run["unrecorded"] if save["role"] == "checkpoint"]
    assert unrecorded, run["events"]
    assert 60 in [save["step"] for save in unrecorded]  # the final save never got there
    for save in unrecorded:
        assert save["snapshot"] in staged and save["snapshot"] not in committed
    assert any(save["role"] == "outputs" for save in run["unrecorded"])
    # The run does not claim what it does not have.
    assert run["phase"] == "SUCCEEDED"
    assert "unrecorded" in run["message"] and "step 60" in run["message"]
    text = project.nodus("runs", "get", "down", env=s3_server.env).stdout
    line = next(line for line in text.splitlines() if "Unrecorded:" in line)
    assert f"step {unrecorded[0]['step']}" in line and "step 60" in line

    refused = project.nodus("runs", "resume", "down", "--step", "60", env=s3_server.env)
    assert refused.returncode != 0
    assert "step 60" in refused.stderr and "unrecorded" in refused.stderr
    assert "Traceback" not in refused.stderr
    for command in (
        ("snapshots", "pin", "down@60"),
        ("snapshots", "pin", unrecorded[-1]["snapshot"]),
    ):
        pin = project.nodus(*command, env=s3_server.env)
        assert pin.returncode == 2, pin.stderr
        assert "step 60" in pin.stderr and "unrecorded save" in pin.stderr


def test_saves_faster_than_a_slow_link_skip_waiting_snapshots_and_list_only_whole_ones(
    project, s3_server, tmp_path
):
    url = f"s3://{s3_server.bucket()}/runs"
    project.write(steps=60, save_every=3, sleep=0.03, extra_args=("--state-bytes", str(1 << 20)))
    # Fault injection: writes to the remote store go at 2 MB/s, slower than the program saves.
    slow = {**s3_server.env, "NODUS_STORE_THROTTLE_MBPS": "2"}
    proc = project.nodus("--store", url, "run", "workload.toml", "--key", "slow", env=slow)
    assert proc.returncode == 0, proc.stderr

    run = project.get("slow")
    skipped = events(run, "checkpoint_upload_skipped")
    assert skipped, "no waiting snapshot was overtaken"
    assert all("overtaken by step" in e["reason"] for e in skipped)
    store = open_remote(url)
    listed = store.list(run=run["id"])
    assert not {e["snapshot"] for e in skipped} & {m.id for m in listed}
    for number, manifest in enumerate(listed):
        assert store.check(manifest.id) == []
        target = tmp_path / f"restored-{number}"
        store.restore(manifest.id, str(target))  # verifies every file against the manifest
    assert listed[-1].step == 60
    assert outputs_result(store, run["id"], tmp_path) == {"steps": 60, "value": expected_value(60)}
    assert staged_manifests(project) == []
