"""What holds a run's checkpoints: ``run_holds``, the one answer rotation, gc and listings use."""

from __future__ import annotations

import pytest
from retention_helpers import HF, run_of, snap

from nodus.retention import holds
from nodus.retention.holds import HoldIndex, run_holds
from nodus.store import open_store


@pytest.fixture
def store(tmp_path):
    return open_store("file://" + str(tmp_path / "store"))


def _types(found: dict, name: str) -> list[str]:
    return [hold.type for hold in found[name]]


def test_an_unfinished_run_holds_what_a_retry_would_restore_whole(store):
    manifests = [
        snap(10, name="s10"),
        snap(30, name="s30"),
        snap(20, attempt=2, name="a2s20"),  # the latest attempt's save is the newest
        snap(40, name="s40", deleted=("state",)),  # cannot continue training: never the target
    ]
    found = run_holds(run_of("RUNNING"), manifests, HoldIndex(store), {})
    assert {name: _types(found, name) for name in found} == {
        "s10": [],
        "s30": [],
        "a2s20": ["resume_target"],
        "s40": [],
    }
    assert found["a2s20"][0].kinds == HF


def test_a_succeeded_run_holds_its_model_weights_and_no_resume_target(store):
    stages = (("prepare", "SUCCEEDED"), ("train", "SUCCEEDED"))
    manifests = [
        snap(10, stage="prepare", name="p10"),
        snap(10, stage="train", name="t10"),
        snap(20, stage="train", name="t20"),
        snap(30, stage="train", name="t30", deleted=("weights",)),
    ]
    found = run_holds(run_of("SUCCEEDED", stages=stages), manifests, HoldIndex(store), {})
    # the last stage's newest save that still holds weights is the run's model
    assert {name: _types(found, name) for name in found} == {
        "p10": [],
        "t10": [],
        "t20": ["model"],
        "t30": [],
    }
    assert found["t20"][0].kinds == ("weights",)


def test_a_last_stage_that_saves_no_weights_leaves_the_model_to_the_stage_that_trained(store):
    # a managed method's train + export: export stores outputs, no checkpoint with weights
    stages = (("train", "SUCCEEDED"), ("export", "SUCCEEDED"))
    manifests = [snap(12, stage="train", name="t12"), snap(24, stage="train", name="t24")]
    found = run_holds(run_of("SUCCEEDED", stages=stages), manifests, HoldIndex(store), {})
    assert {name: _types(found, name) for name in found} == {"t12": [], "t24": ["model"]}


@pytest.mark.parametrize("phase", ["FAILED", "CANCELLED"])
def test_a_run_that_stopped_for_good_holds_neither(store, phase):
    found = run_holds(run_of(phase), [snap(10, name="s10")], HoldIndex(store), {})
    assert found == {"s10": []}


def test_pins_and_epoch_holds_come_from_the_store_until_released(store):
    early, epoch_end, newest = snap(6), snap(12, epoch=1.0), snap(18)
    run = run_of("RUNNING", save_each_epoch=True)
    assert holds.pin(store, early) is True
    found = run_holds(run, [early, epoch_end, newest], HoldIndex(store), {})
    assert [(h.type, h.kinds) for h in found[early.id]] == [("pin", HF)]
    assert [(h.type, h.kinds) for h in found[epoch_end.id]] == [("epoch", ("weights",))]
    assert holds.release(store, early, epoch_save=False) == ["pin"]
    assert holds.release(store, epoch_end, epoch_save=True) == ["epoch"]
    found = run_holds(run, [early, epoch_end, newest], HoldIndex(store), {})
    assert found[early.id] == [] and found[epoch_end.id] == []


def test_branches_hold_by_snapshot_id_or_by_step(store):
    manifests = [snap(10, name="s10"), snap(10, attempt=2, name="a2s10"), snap(20, name="s20")]
    branches = {"s20": (("run_b", "full-state"),), 10: (("run_c", "weights"),)}
    found = run_holds(run_of("FAILED"), manifests, HoldIndex(store), branches)
    assert [(h.type, h.kinds) for h in found["s20"]] == [("branch", HF)]
    assert [(h.type, h.kinds) for h in found["s10"]] == [("branch", ("weights",))]
    assert [(h.type, h.kinds) for h in found["a2s10"]] == [("branch", ("weights",))]
