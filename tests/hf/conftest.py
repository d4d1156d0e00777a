"""Fixtures for the hf-trainer-v1 tests: the quick-start program run for real.

The runner's half of the protocol is played by :mod:`nodus.stages.hf.driver` (real processes,
real files, real signals). Runs that several tests compare against are made once per session.
"""

from __future__ import annotations

import os

import pytest
from hf_helpers import QUICKSTART, SAVE_EVERY, TRAIN

from nodus.stages.hf import driver


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="session")
def bare_hash(workdir) -> str:
    """Final weights of an uninterrupted bare `python train.py` (no nodus at all)."""
    run = driver.start(driver.new_copy(QUICKSTART, workdir, "bare"), TRAIN, None)
    assert run.finish() == 0, run.log()[-3000:]
    return driver.weights_hash(os.path.join(run.copy, "out", "model"))


@pytest.fixture(scope="session")
def prepared_run(workdir) -> driver.Attempt:
    """One uninterrupted run under explicit hf-trainer-v1: its checkpoints seed the resumes."""
    run = driver.start(
        driver.new_copy(QUICKSTART, workdir, "prepared"),
        TRAIN,
        "hf-trainer-v1",
        save_every=SAVE_EVERY,
        save_each_epoch=True,
    )
    assert run.finish() == 0, run.log()[-3000:]
    return run
