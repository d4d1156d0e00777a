"""Shared constants and helpers of the hf-trainer-v1 tests (imported as ``hf_helpers``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nodus.stages.hf import driver

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "examples" / "quickstart")
PROGRAMS = Path(__file__).resolve().parent / "programs"
TRAIN = [sys.executable, "train.py"]
SAVE_EVERY = 5  # with 12 steps per epoch: saves inside epochs and at boundaries 12, 24, 36, 48


def resume(
    source_run: driver.Attempt,
    step: int,
    workdir: str,
    name: str,
    integration: str = "hf-trainer-v1",
    env: dict | None = None,
) -> driver.Attempt:
    """A fresh copy with ``checkpoint-<step>`` restored, started with ``restored_step``."""
    copy = driver.new_copy(QUICKSTART, workdir, name)
    driver.restore(source_run, step, copy)
    return driver.start(
        copy,
        TRAIN,
        integration,
        save_every=SAVE_EVERY,
        save_each_epoch=True,
        restored_step=step,
        env=env,
    )


def final_hash(run: driver.Attempt) -> str:
    return driver.weights_hash(os.path.join(run.copy, "out", "model"))
