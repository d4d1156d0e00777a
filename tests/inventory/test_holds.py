"""`nodus snapshots pin|release` and the holds `snapshots get` reports."""

from __future__ import annotations

import json

import pytest
from snapshot_helpers import Home, counter_workload, run_with_one_kill

# Outside the quick tier: holds on the session's real runs, and a run killed once.
pytestmark = [
    pytest.mark.slow,
    # with the other tests of the session's `hf_run` and `counter_run`: each is made once
    pytest.mark.xdist_group("inventory_runs"),
]


def _holds(hf_run, store: str, ref: str) -> list[str]:
    proc = hf_run.home.nodus("snapshots", "get", ref, "--store", store, "--json", "--no-verify")
    assert proc.returncode == 0, proc.stderr
    return [hold["type"] for hold in json.loads(proc.stdout)["holds"]]


def test_pin_is_kept_in_the_store_and_shown_by_list_and_get(hf_run, store_copy):
    ref = f"{hf_run.run_id}@6"
    first = hf_run.home.nodus("snapshots", "pin", ref, "--store", store_copy)
    assert first.returncode == 0 and "pinned" in first.stderr
    again = hf_run.home.nodus("snapshots", "pin", ref, "--store", store_copy)
    assert again.returncode == 0 and "already pinned" in again.stderr
    rows = json.loads(
        hf_run.home.nodus(
            "runs", "snapshots", hf_run.run_id, "--store", store_copy, "--json"
        ).stdout
    )
    assert [row["pinned"] for row in rows] == [True, False, False]
    assert rows[0]["holds"] == [
        {
            "type": "pin",
            "kinds": ["weights", "state", "files"],
            "detail": rows[0]["holds"][0]["detail"],
        }
    ]
    # The shared store was not touched: holds live in the store the snapshot lives in.
    assert _holds(hf_run, hf_run.home.store_url, ref) == []


def test_release_drops_the_pin_and_the_epoch_hold(hf_run, store_copy):
    ref = f"{hf_run.run_id}@12"
    assert hf_run.home.nodus("snapshots", "pin", ref, "--store", store_copy).returncode == 0
    assert _holds(hf_run, store_copy, ref) == ["pin", "epoch"]
    proc = hf_run.home.nodus("snapshots", "release", ref, "--store", store_copy, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "id": json.loads(proc.stdout)["id"],
        "pinned": False,
        "holds": [],
    }
    assert _holds(hf_run, store_copy, ref) == []
    again = hf_run.home.nodus("snapshots", "release", ref, "--store", store_copy)
    assert again.returncode == 0 and "no pin or epoch hold" in again.stderr


def test_pinning_outputs_or_a_missing_snapshot_is_refused(hf_run, store_copy):
    outputs = hf_run.home.store(store_copy).list(run=hf_run.run_id, role="outputs")[-1]
    proc = hf_run.home.nodus("snapshots", "pin", outputs.id, "--store", store_copy)
    assert proc.returncode == 2 and "only checkpoints" in proc.stderr
    proc = hf_run.home.nodus("snapshots", "pin", "ckpt_0123456789abcdef", "--store", store_copy)
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_an_interrupted_run_holds_the_snapshot_a_resume_would_restore(tmp_path):
    project = tmp_path / "project"
    counter_workload(project, resume=False)
    info = run_with_one_kill(Home(tmp_path / "home"), project, "counter-interrupted")
    assert info.home.catalog().get_run(info.run_id).phase == "INTERRUPTED"
    rows = info.home.json("runs", "snapshots", info.run_id)
    held = [row["step"] for row in rows if any(h["type"] == "resume_target" for h in row["holds"])]
    assert held == [rows[-1]["step"]]  # the newest: what `nodus runs resume` restores
    assert not any(row["model"] for row in rows)  # an unfinished run has no model yet
