"""Points 2 and 8 through the driver: SIGKILLs, save requests, stop, commits and pruning."""

from __future__ import annotations

import os
import random

import pytest
from hf_helpers import QUICKSTART, SAVE_EVERY, TRAIN, final_hash

from nodus.stages.hf import driver
from nodus.stages.hf.writer import SLOW_WRITE_ENV

pytestmark = pytest.mark.hf


def _attempt(workdir, name, previous=None, step=None, env=None) -> driver.Attempt:
    copy = driver.new_copy(QUICKSTART, workdir, name)
    if previous is not None:
        driver.restore(previous, step, copy)
    return driver.start(
        copy,
        TRAIN,
        "hf-trainer-v1",
        save_every=SAVE_EVERY,
        save_each_epoch=True,
        restored_step=step,
        env=env,
    )


def test_sigkill_at_three_random_steps_one_during_a_save_ends_bit_identical(workdir, bare_hash):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    # save steps inside epoch 0..1 and inside epochs 2..3, then one kill in the middle of a save
    first = rng.choice([5, 10, 12, 15, 20])
    second = rng.choice([25, 30, 35, 36, 40])
    run = _attempt(workdir, "kill-1")
    run.wait_for_save(first)
    run.kill()
    step = max(run.recorded_steps())  # like the runner: the newest published save
    run = _attempt(workdir, "kill-2", run, step)
    run.wait_for_save(second)
    run.kill()
    step = max(run.recorded_steps())
    slow = _attempt(workdir, "kill-3", run, step, env={SLOW_WRITE_ENV: "600"})
    slow.wait_until(slow.saving_now, 120, "a save in progress")
    slow.kill()
    assert slow.recorded_steps() == []  # the interrupted save was never published ...
    assert os.listdir(slow.state) == [f"checkpoint-{step}"]  # ... state/ holds only complete ones
    last = _attempt(workdir, "kill-4", run, step)
    assert last.finish() == 0, last.log()[-3000:]
    assert final_hash(last) == bare_hash, f"random seed {seed}: killed after {first}, {second}"


def test_requests_are_answered_and_stop_blocks_with_zero_lost_steps(workdir, bare_hash):
    # slow saves keep training slow enough to talk to it; they never change the result
    run = _attempt(workdir, "requests", env={SLOW_WRITE_ENV: "0.3"})
    run.wait_for_save(10)
    run.commit(10)
    asked = run.request("continue")
    run.wait_until(
        lambda: any(asked in run.record(s)["requests"] for s in run.recorded_steps()),
        60,
        "an answer to the continue request",
    )
    assert "checkpoint-5" not in os.listdir(run.state)  # older than the committed snapshot
    assert "checkpoint-10" in os.listdir(run.state)

    stop = run.request("stop")
    run.wait_until(
        lambda: any(stop in run.record(s)["requests"] for s in run.recorded_steps()),
        60,
        "an answer to the stop request",
    )
    stopped_at = max(run.recorded_steps())
    assert run.record(stopped_at)["requests"] == [stop]
    assert run.process.poll() is None  # it blocks: the runner ends it after capturing
    run.kill()
    assert max(run.recorded_steps()) == stopped_at  # it trained no further after answering

    resumed = _attempt(workdir, "after-stop", run, stopped_at)
    assert resumed.finish() == 0, resumed.log()[-3000:]
    assert final_hash(resumed) == bare_hash
