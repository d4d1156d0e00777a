"""`nodus runs snapshots` and `nodus snapshots get` on real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from snapshot_helpers import HF_STEPS

# Outside the quick tier: listings of the session's real Trainer run.
pytestmark = [
    pytest.mark.slow,
    # with the other tests of the session's `hf_run` and `counter_run`: each is made once
    pytest.mark.xdist_group("inventory_runs"),
]


def test_runs_snapshots_lists_each_committed_save_with_kinds_metrics_and_the_model(hf_run):
    rows = hf_run.home.json("runs", "snapshots", hf_run.run_id)
    assert [row["step"] for row in rows] == [6, 12, HF_STEPS]
    for row in rows:
        assert row["kinds"] == ["weights", "state", "files"]
        assert row["bytes_by_kind"]["weights"] > 100_000  # model.safetensors and friends
        assert row["bytes_by_kind"]["state"] > row["bytes_by_kind"]["weights"]  # Adam moments
        assert row["total_bytes"] == sum(row["bytes_by_kind"].values())
        assert set(row["metrics"]) >= {"loss", "learning_rate"}
        assert row["pinned"] is False
    assert [row["model"] for row in rows] == [False, False, True]  # the save at the last update
    assert rows[1]["epoch"] == 1.0


def test_runs_snapshots_table_shows_the_columns(hf_run):
    proc = hf_run.home.nodus("runs", "snapshots", "quick-hf")  # by key
    assert proc.returncode == 0, proc.stderr
    header, *lines = proc.stdout.splitlines()
    assert header.split() == [
        "ID",
        "STEP",
        "EPOCH",
        "ATTEMPT",
        "KINDS",
        "METRICS",
        "PINNED",
        "MODEL",
    ]
    assert len(lines) == 3 and "loss=" in lines[0] and "weights" in lines[0]
    assert lines[-1].rstrip().endswith("yes") and lines[0].rstrip().endswith("-")


def test_sort_by_metric_puts_the_best_step_first(hf_run):
    rows = hf_run.home.json("runs", "snapshots", hf_run.run_id, "--sort", "loss")
    losses = [row["metrics"]["loss"] for row in rows]
    assert losses == sorted(losses)
    reverse = hf_run.home.json("runs", "snapshots", hf_run.run_id, "--sort", "loss", "--reverse")
    assert [row["id"] for row in reverse] == [row["id"] for row in reversed(rows)]


def test_sort_by_a_metric_nobody_logged_is_refused_naming_the_choices(hf_run):
    proc = hf_run.home.nodus("runs", "snapshots", hf_run.run_id, "--sort", "reward")
    assert proc.returncode == 2
    assert "reward" in proc.stderr and "loss" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_stage_and_unknown_run_are_refused(hf_run):
    proc = hf_run.home.nodus("runs", "snapshots", hf_run.run_id, "--stage", "eval")
    assert proc.returncode == 2 and "no stage 'eval'" in proc.stderr
    proc = hf_run.home.nodus("runs", "snapshots", "run_000000000000")
    assert proc.returncode == 2 and "run_000000000000" in proc.stderr


def test_every_reference_form_names_the_same_snapshot(hf_run):
    rows = hf_run.home.json("runs", "snapshots", hf_run.run_id)
    wanted = rows[1]["id"]
    for ref in (
        wanted,
        f"{hf_run.run_id}@12",
        f"{hf_run.run_id}/main@12",
        "quick-hf@12",
        "quick-hf/main@12",
    ):
        assert hf_run.home.json("snapshots", "get", ref)["id"] == wanted, ref


def test_get_shows_bytes_per_kind_files_verified_hashes_and_the_epoch_hold(hf_run):
    data = hf_run.home.json("snapshots", "get", f"{hf_run.run_id}@12")
    assert data["verified"] is True and data["problems"] == []
    names = {Path(f["path"]).name for f in data["files"]}
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json", "tokenizer.json"} <= names
    assert all(f["verified"] is True and len(f["hash"]) == 32 for f in data["files"])
    assert data["bytes_by_kind"] == {
        kind: sum(f["size"] for f in data["files"] if f["kind"] == kind) for kind in data["kinds"]
    }
    # The quick start saves each epoch: step 12 ends epoch 0, so its weights are held.
    assert [hold["type"] for hold in data["holds"]] == ["epoch"]
    text = hf_run.home.nodus("snapshots", "get", f"{hf_run.run_id}@12")
    assert text.returncode == 0 and "hashes:  verified" in text.stdout


def test_a_damaged_blob_shows_in_get_and_stops_a_download(hf_run, store_copy, tmp_path):
    snapshot = hf_run.home.json("snapshots", "get", f"{hf_run.run_id}@14")
    weights = next(f for f in snapshot["files"] if f["path"].endswith("model.safetensors"))
    blob = Path(store_copy[len("file://") :]) / "blobs" / weights["hash"][:2] / weights["hash"]
    blob.chmod(0o644)
    blob.write_bytes(b"not the weights")
    proc = hf_run.home.nodus("snapshots", "get", snapshot["id"], "--store", store_copy, "--json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["verified"] is False and "model.safetensors" in data["problems"][0]
    bad = [f["path"] for f in data["files"] if f["verified"] is False]
    assert bad == [weights["path"]]
    text = hf_run.home.nodus("snapshots", "get", snapshot["id"], "--store", store_copy)
    assert text.returncode == 1 and "DAMAGED" in text.stdout
    target = tmp_path / "model"
    proc = hf_run.home.nodus(
        "snapshots", "download", snapshot["id"], "--store", store_copy, "--to", str(target)
    )
    assert proc.returncode == 1 and "do not match" in proc.stderr
    assert list(target.iterdir()) == []  # nothing half-written is left behind


def test_missing_step_and_malformed_reference_are_refused(hf_run, tmp_path):
    for command in (("snapshots", "get"), ("snapshots", "download"), ("snapshots", "pin")):
        extra = ("--to", str(tmp_path / "out")) if command[1] == "download" else ()
        proc = hf_run.home.nodus(*command, f"{hf_run.run_id}@7", *extra)
        assert proc.returncode == 2, proc.stderr
        assert "no committed snapshot at step 7; committed steps: 6, 12, 14" in proc.stderr
    proc = hf_run.home.nodus("snapshots", "get", "last-one")
    assert proc.returncode == 2 and "RUN@STEP" in proc.stderr
    proc = hf_run.home.nodus("snapshots", "get", f"{hf_run.run_id}/eval@12")
    assert proc.returncode == 2 and "no stage 'eval'" in proc.stderr


def test_kinds_deleted_by_retention_show_in_listings_and_get(hf_run, store_copy):
    from nodus.store import open_store

    first = hf_run.home.json("snapshots", "get", f"{hf_run.run_id}@6")
    open_store(store_copy).delete_kind(first["id"], "state", reason="rotation")

    rows = hf_run.home.json("runs", "snapshots", hf_run.run_id, "--store", store_copy)
    assert rows[0]["kinds"] == ["weights", "files"] and rows[0]["deleted_kinds"] == ["state"]
    assert "state" not in rows[0]["bytes_by_kind"]
    assert all(row["deleted_kinds"] == [] for row in rows[1:])
    table = hf_run.home.nodus("runs", "snapshots", hf_run.run_id, "--store", store_copy)
    assert "state deleted" in table.stdout.splitlines()[1]

    data = hf_run.home.json("snapshots", "get", first["id"], "--store", store_copy)
    assert data["deleted"]["state"]["reason"] == "rotation"
    assert data["deleted"]["state"]["state"] == "deleted"
    assert data["verified"] is True  # the blobs it freed are no problem
    text = hf_run.home.nodus("snapshots", "get", first["id"], "--store", store_copy)
    assert "deleted: state by rotation" in text.stdout


def test_runs_list_shows_the_trainers_last_step_and_logged_loss(hf_run):
    [row] = [row for row in hf_run.home.json("runs", "list") if row["id"] == hf_run.run_id]
    assert row["step"] == HF_STEPS and isinstance(row["loss"], float)
    assert row["duration_seconds"] > 0
