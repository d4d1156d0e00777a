"""Points 2-4: saves at boundaries, stock-Trainer checkpoints, bit-identical automatic resume."""

from __future__ import annotations

import os
import sys

import pytest
from hf_helpers import PROGRAMS, QUICKSTART, final_hash, resume

from nodus.stages.hf import driver

pytestmark = pytest.mark.hf

# The Trainer's own checkpoint file set (Trainer._save_checkpoint with a tokenizer).
TRAINER_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state.pth",
    "trainer_state.json",
    "training_args.bin",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
}


def test_saves_every_n_steps_and_at_each_epoch_end_without_changing_training(
    prepared_run, bare_hash
):
    # 4 epochs of 12 steps, save_every=5, save_each_epoch: the union of both cadences
    assert prepared_run.recorded_steps() == [5, 10, 12, 15, 20, 24, 25, 30, 35, 36, 40, 45, 48]
    assert sorted(os.listdir(prepared_run.state)) == sorted(
        f"checkpoint-{s}" for s in prepared_run.recorded_steps()
    )
    assert final_hash(prepared_run) == bare_hash  # saving in the background changed nothing


def test_checkpoints_hold_the_trainer_files_and_the_step_metrics(prepared_run):
    folder = os.path.join(prepared_run.state, "checkpoint-15")
    assert set(os.listdir(folder)) == TRAINER_FILES | {"nodus-identity.json"}
    record = prepared_run.record(15)
    assert record["checkpoint"] == "checkpoint-15" and record["epoch"] == 1.25
    assert set(record["metrics"]) >= {"loss", "learning_rate", "epoch", "grad_norm"}
    assert not os.listdir(os.path.join(prepared_run.control, "tmp"))  # nothing left half-built


# inside epoch 0 and inside epoch 2 are covered by test_qualify (and random ones by the kills)
@pytest.mark.parametrize("step", [12, 40], ids=["epoch-boundary", "inside-epoch-3"])
def test_restored_attempt_resumes_by_itself_bit_identically(prepared_run, bare_hash, workdir, step):
    run = resume(prepared_run, step, workdir, f"resume-{step}")
    assert run.finish() == 0, run.log()[-3000:]
    assert run.recorded_steps()[0] > step  # it continued from the restored step ...
    assert final_hash(run) == bare_hash  # ... and ended exactly where the uninterrupted run did


def _bare_resume(prepared_run, step, workdir) -> str:
    copy = driver.new_copy(QUICKSTART, workdir, f"bare-resume-{step}")
    driver.restore(prepared_run, step, copy)
    run = driver.start(
        copy,
        [sys.executable, str(PROGRAMS / "bare_resume.py")],
        None,
        env={"RESUME_FROM": os.path.join(copy, "state", f"checkpoint-{step}")},
    )
    assert run.finish() == 0, run.log()[-3000:]
    return final_hash(run)


def test_a_bare_trainer_resumes_from_an_integration_checkpoint(prepared_run, bare_hash, workdir):
    # a downloaded snapshot works with resume_from_checkpoint and no nodus at all
    assert _bare_resume(prepared_run, 5, workdir) == bare_hash


def test_the_upstream_defect_nodus_fixes_is_real(prepared_run, bare_hash, workdir):
    # SPEC §6: bare Trainer + Accelerate resumed inside epoch >= 1 replays epoch 0's order;
    # the same checkpoint resumed under nodus is exact (test above, "inside-epoch-1").
    assert _bare_resume(prepared_run, 15, workdir) != bare_hash
