"""Runs that start from another run's snapshot under hf-trainer-v1: resume_from and branches.

One finished parent trains the quick-start for 8 optimizer steps (32 examples, batch 8, two
epochs of 4 steps), saves every 2 and at each epoch end. Each child is a real ``nodus`` process
over a copy of the same code: a child that continues the parent's training state must end with
the parent's very weights, and a branch from weights must start at step 0 holding the parent's
weights. Only the branch from weights saves at epoch ends (docs/methods.md).
"""

from __future__ import annotations

import json

import pytest
import tomli_w
from runner_e2e_helpers import Project

# Every test here uses the module's finished parent: one xdist worker trains it, once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lineage")]

SMALL = {"QUICKSTART_EXAMPLES": "32", "QUICKSTART_EPOCHS": "2"}  # 8 steps


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Project:
    """The finished parent (key ``parent``): training state kept at steps 4, 6 and 8 only."""
    project = Project(
        tmp_path_factory.mktemp("lineage"),
        env=SMALL,
        save_every=2,
        write_delay="0",
        keep_recoverable=2,
    )
    proc = project.nodus("run", str(project.file), "--key", "parent", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert project.committed_steps("parent") == [2, 4, 6, 8]
    return project


def _child_file(project: Project, name: str, epoch_saves: bool = False, **changes) -> str:
    """The parent's workload file with ``changes`` (top-level keys; ``env`` merged), without
    its ``save_each_epoch`` unless ``epoch_saves``: a run continuing the parent's training
    state may not ask for epoch-end saves."""
    import tomllib

    workload = tomllib.loads(project.file.read_text())
    if not epoch_saves:
        del workload["execution"]["save_each_epoch"]
    env = {**workload["env"], **changes.pop("env", {})}
    workload.update(changes, env=env)
    path = project.root / f"{name}.toml"
    path.write_text(tomli_w.dumps(workload))
    return str(path)


_HASHES: dict[str, str] = {}


def _hash(project: Project, run: str) -> str:
    """The final weights' hash of the run's outputs (downloaded once per run)."""
    if run not in _HASHES:
        _HASHES[run] = project.outputs_hash(run)
    return _HASHES[run]


def _newest_run(project: Project) -> str:
    runs = json.loads(project.nodus("runs", "list", "--json").stdout)
    return runs[0]["id"]


def _versions(project: Project, run: str) -> list[tuple]:
    """(origin, step, run's model) of each model version ``run`` registered."""
    listed = json.loads(project.nodus("models", "list", "--json").stdout)
    return [(v["origin"], v["step"], v["run_model"]) for v in listed if v["run"] == run]


def _stored_epoch_saves(project: Project, run: str) -> bool:
    """``save_each_epoch`` of the run's stage in its stored resolution (what the runner uses)."""
    from nodus.runner.catalog.core import Catalog

    catalog = Catalog(str(project.home))
    try:
        return catalog.get_run(run).workload["stages"][0]["execution"]["save_each_epoch"]
    finally:
        catalog.close()


def test_resume_from_inside_an_epoch_ends_bit_identical_to_the_parent(parent):
    file = _child_file(parent, "child", resume_from="parent@6")
    proc = parent.nodus("run", file, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    child = _newest_run(parent)
    assert parent.get(child)["parent"]["step"] == 6
    assert parent.committed_steps(child) == [8]  # it continued at step 6, of the second epoch
    assert _hash(parent, child) == _hash(parent, "parent")


def test_a_full_state_branch_ends_bit_identical_to_the_parent(parent):
    proc = parent.nodus("runs", "branch", "parent@4", "--from", "full-state", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    child = _newest_run(parent)
    assert parent.get(child)["parent"]["mode"] == "full-state"
    assert parent.committed_steps(child) == [6, 8]
    assert _hash(parent, child) == _hash(parent, "parent")


def test_a_weights_branch_starts_at_step_zero_with_the_parents_weights(parent):
    from transformers import GPT2LMHeadModel

    from nodus.stages.hf.inprocess.identity import weights_digest

    proc = parent.nodus(
        "runs", "branch", "parent@4", "--from", "weights", "--set", "name=warm", timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    child = _newest_run(parent)
    data = parent.get(child)
    (event,) = [e for e in data["events"] if e["type"] == "warm_start"]
    target = parent.root / "parent-weights-4"
    download = ("snapshots", "download", "parent@4", "--artifact", "model", "--to", str(target))
    assert parent.nodus(*download).returncode == 0
    assert event["weights"] == weights_digest(GPT2LMHeadModel.from_pretrained(target))
    # a fresh start: its own saves from step 2, the Trainer's step count from 0
    assert parent.committed_steps(child) == [2, 4, 6, 8]
    assert data["stages"][0]["attempts"][0]["restored_step"] is None
    assert _hash(parent, child) != _hash(parent, "parent")
    # A fresh start counts its own epochs: both epoch ends are saved and registered.
    assert _versions(parent, child) == [("epoch", 4, False), ("epoch", 8, True)]


def test_a_full_state_branch_makes_no_epoch_end_saves_and_says_so(parent):
    # 12 updates from the parent's step 4: epochs end at 8 and 12, periodic saves at 6, 9, 12.
    proc = parent.nodus(
        "runs",
        "branch",
        "parent@4",
        "--from",
        "full-state",
        "--set",
        "env.QUICKSTART_MAX_STEPS=12",
        "--set",
        "execution.save_every=3",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "makes no epoch-end saves (the parent's save_each_epoch = true is off)" in proc.stderr
    child = _newest_run(parent)
    assert _stored_epoch_saves(parent, child) is False
    assert parent.committed_steps(child) == [6, 9, 12]  # no save at the epoch end at step 8
    assert _versions(parent, child) == [("run", 12, True)]  # no epoch version


def test_a_continuation_asking_for_epoch_saves_is_refused_naming_the_rule(parent):
    before = json.loads(parent.nodus("runs", "list", "--json").stdout)
    file = _child_file(parent, "epochs", epoch_saves=True, resume_from="parent@6")
    branch = ("runs", "branch", "parent@4", "--from", "full-state")
    for args, field in (
        (("run", file), "stages[0].execution.save_each_epoch: True — "),
        ((*branch, "--set", "execution.save_each_epoch=true"), "--set execution.save_each_epoch"),
    ):
        proc = parent.nodus(*args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert field in proc.stderr, proc.stderr
        assert "makes no epoch-end saves in the stage that continues it" in proc.stderr
        assert "its length is counted in updates, not epochs" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert json.loads(parent.nodus("runs", "list", "--json").stdout) == before


def test_a_snapshot_without_training_state_is_refused_for_full_state_only(parent):
    proc = parent.nodus("runs", "branch", "parent@2", "--from", "full-state")
    assert proc.returncode == 2, proc.stderr
    assert "SNAPSHOT: 'parent@2' — ckpt_" in proc.stderr
    assert "no longer holds its training state (it holds weights)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_changed_dataset_fails_the_restored_attempt_naming_it(parent):
    file = _child_file(
        parent, "other-data", resume_from="parent@6", env={"QUICKSTART_EXAMPLES": "24"}
    )
    proc = parent.nodus("run", file, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    child = _newest_run(parent)
    (attempt,) = parent.get(child)["stages"][0]["attempts"]
    assert attempt["restored_step"] == 6
    assert "train dataset content differs" in attempt["detail"], attempt["detail"]


def test_a_changed_training_argument_fails_the_restored_attempt_naming_both_values(parent):
    """What only the program knows (its own TrainingArguments) is checked when the restored
    attempt starts, and the refusal names the field with the checkpoint's value and the new one
    (a managed method's are known at submit: refused there, tests/methods/test_method_rules.py)."""
    file = _child_file(parent, "other-seed", resume_from="parent@6", env={"QUICKSTART_SEED": "7"})
    proc = parent.nodus("run", file, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (attempt,) = parent.get(_newest_run(parent))["stages"][0]["attempts"]
    assert "changed training arguments: seed (checkpoint 42, now 7)" in attempt["detail"]
