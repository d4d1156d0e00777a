"""The qualification suite behind ``nodus qualify``.

One uninterrupted bare run of :mod:`qualify_program` sets the reference weights. The same program
then runs under hf-trainer-v1 and is SIGKILLed repeatedly: after the saves of steps inside epoch 0,
exactly at an epoch boundary and inside a later epoch (``HF_QUALIFY_KILL_STEPS``), and once in
the middle of a save. Each attempt is restored from the previous one's published checkpoint into
a fresh copy. The environment qualifies when the final weights are bit-identical and the
interrupted save never became visible.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from nodus.schemas import defaults
from nodus.stages.hf import driver
from nodus.stages.hf.qualification import current_versions, record_result
from nodus.stages.hf.writer import SLOW_WRITE_ENV

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qualify_program.py")
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
}


@dataclass
class Result:
    passed: bool
    reference: str = ""
    resumed: str = ""
    resumed_from: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    record: str = ""


def qualify(home: str, say: Callable[[str], None] = print) -> Result:
    versions = current_versions()
    workdir = tempfile.mkdtemp(prefix="qualify-", dir=_tmp_root(home))
    try:
        result = _run_suite(workdir, home, say)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    details = {
        "reference": result.reference,
        "resumed": result.resumed,
        "resumed_from": result.resumed_from,
        "problems": result.problems,
    }
    result.record = record_result(home, versions, result.passed, details)
    return result


def _run_suite(workdir: str, home: str, say: Callable[[str], None]) -> Result:
    source = os.path.join(workdir, "source")
    os.makedirs(source)
    shutil.copy(PROGRAM, os.path.join(source, "train.py"))
    command = [sys.executable, "train.py"]

    say("uninterrupted reference run (no integration)")
    bare = driver.start(driver.new_copy(source, workdir, "bare"), command, None, env=OFFLINE)
    if bare.finish() != 0:
        return Result(False, problems=[f"the reference run failed:\n{bare.log()[-2000:]}"])
    reference = driver.weights_hash(os.path.join(bare.copy, "out", "model"))

    resumed_from: list[int] = []
    previous, step = None, None
    for number, kill_after in enumerate(defaults.HF_QUALIFY_KILL_STEPS, start=1):
        say(f"attempt {number}: SIGKILL after the save of step {kill_after}")
        attempt = _attempt(source, workdir, f"a{number}", command, previous, step, home)
        attempt.wait_for_save(kill_after)
        attempt.kill()
        previous, step = attempt, kill_after
        resumed_from.append(step)

    say(f"attempt {len(resumed_from) + 1}: SIGKILL in the middle of a save")
    attempt = _attempt(
        source, workdir, "mid-save", command, previous, step, home, env={SLOW_WRITE_ENV: "600"}
    )
    attempt.wait_until(attempt.saving_now, 120, "a save in progress")
    attempt.kill()
    problems = (
        []
        if attempt.recorded_steps() == [] and os.listdir(attempt.state) == [f"checkpoint-{step}"]
        else ["an interrupted save became visible in state/"]
    )

    say("last attempt: resume from the newest published checkpoint and finish")
    final = _attempt(source, workdir, "final", command, previous, step, home)
    resumed_from.append(step)
    if final.finish() != 0:
        return Result(
            False, reference, problems=[f"the resumed run failed:\n{final.log()[-2000:]}"]
        )
    resumed = driver.weights_hash(os.path.join(final.copy, "out", "model"))
    if resumed != reference:
        problems.append("the resumed run's final weights differ from the uninterrupted run's")
    return Result(not problems, reference, resumed, resumed_from, problems)


def _attempt(source, workdir, name, command, previous, step, home, env=None) -> driver.Attempt:
    copy = driver.new_copy(source, workdir, name)
    if previous is not None:
        driver.restore(previous, step, copy)
    # Explicit v1, so a program outside the profile fails loudly instead of running unprepared;
    # `qualifying` lifts only the qualification check, which is what is being established here.
    return driver.start(
        copy,
        command,
        "hf-trainer-v1",
        save_every=1,
        save_each_epoch=True,
        restored_step=step,
        home=home,
        env={**OFFLINE, **(env or {})},
        qualifying=True,
    )


def _tmp_root(home: str) -> str:
    root = os.path.join(home, "tmp")
    os.makedirs(root, exist_ok=True)
    return root
