"""Every managed method recovers, and exactly (issue 39.4).

sft, dpo and grpo from their examples: the train stage's program SIGKILLed twice, at committed
saves inside and past the first epoch, then the runner told to stop (SIGTERM: the run ends
INTERRUPTED, exit 3) and ``nodus runs resume``d: the run SUCCEEDS and its final adapter is
byte-identical to an uninterrupted run's. dpo and grpo train past their examples' step counts
here (the examples stay within, or barely past, their first epoch), each against an
uninterrupted run of the same workload.
"""

from __future__ import annotations

import os
import re
import signal

import pytest
from methods_helpers import Example, adapter_hash, file_hash

from nodus import protocol
from nodus.client import Client
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

TRAIN = "train"


def _example(
    root, name: str, max_steps: int, write_delay: str = "0", prepared: Example | None = None
) -> Example:
    """A copy of ``examples/<name>`` training ``max_steps`` (of ``prepared``'s copy if given)."""
    root.mkdir()
    example = Example(root, name, write_delay=write_delay, prepared=prepared)
    _workload(example, max_steps=max_steps)
    return example


def _workload(example: Example, **method: int) -> None:
    """Set ``[method]`` keys of the example's copy (the keys the example sets already)."""
    text = example.file.read_text()
    for key, value in method.items():
        text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert count == 1, key
    example.file.write_text(text)


def _adapter_files(example: Example, key: str) -> dict[str, str]:
    """The final weights: the adapter the train stage left, and the export stage's adapter and
    merged model (their configs name the example copy's base folder, a path: not compared)."""
    outputs = example.outputs(key)
    model = outputs / "out" / "model"
    return {
        "trained adapter": adapter_hash(outputs),
        "exported adapter": file_hash(model / "adapter" / "adapter_model.safetensors"),
        "merged model": file_hash(model / "model.safetensors"),
    }


def _uninterrupted(example: Example) -> dict[str, str]:
    proc = example.nodus("run", str(example.file), "--key", "whole", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return _adapter_files(example, "whole")


def _killed_twice_noticed_and_resumed(
    example: Example, kills: tuple[int, int], notice: int
) -> dict[str, str]:
    """Kill attempts 1 and 2 at their saves of ``kills``, SIGTERM the runner once attempt 3
    saved ``notice``, resume; the run's attempts and final adapter."""
    runner = example.start("run", str(example.file), "--key", "killed")
    example.kill_after_save("killed", 1, kills[0], runner)
    example.kill_after_save("killed", 2, kills[1], runner)
    wait_for(
        lambda: [a for a in example.attempts("killed") if a["number"] == 3 and a["pid"]],
        "attempt 3",
        runner,
    )
    control = example.home / "work" / example.run_id("killed") / TRAIN / "copy"
    record = protocol.ControlPaths(str(control / protocol.CONTROL_DIR)).save_record(notice)
    wait_for(lambda: os.path.exists(record), f"attempt 3 saving {notice}", runner)
    runner.send_signal(signal.SIGTERM)  # the runner is told to stop: a preemption notice
    assert runner.wait(timeout=300) == 3, runner.log_path.read_text()[-3000:]
    assert example.get("killed")["phase"] == "INTERRUPTED"

    resumed = example.nodus("runs", "resume", "killed", timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    view = example.get("killed")
    assert view["phase"] == "SUCCEEDED"
    (train,) = [s for s in view["stages"] if s["name"] == TRAIN]
    attempts = train["attempts"]
    assert [a["outcome"] for a in attempts] == [
        "lost",
        "lost",
        "preempted",
        "succeeded",
    ]
    restored = [a["restored_step"] for a in attempts[1:]]
    assert restored[:2] == list(kills) and restored[2] >= notice, restored
    return _adapter_files(example, "killed")


@pytest.mark.xdist_group("sft_run")
def test_sft_killed_twice_and_stopped_resumes_to_the_same_adapter(sft_run, tmp_path):
    """24 steps, 8 per epoch: killed at 6 (epoch 1) and 12 (epoch 2), stopped past 18."""
    example = Example(tmp_path, "sft", write_delay="1", prepared=sft_run)
    killed = _killed_twice_noticed_and_resumed(example, (6, 12), 18)
    assert killed == _adapter_files(sft_run, "sft")


def test_dpo_killed_twice_and_stopped_resumes_to_the_same_adapter(tmp_path):
    """20 steps, 9 per epoch (36 pairs, 4 a step): killed at 4 (epoch 1) and 12 (epoch 2),
    stopped past 16 (epoch 2); every recovery checks the dataset's identity."""
    whole = _example(tmp_path / "whole", "dpo", 20)
    reference = _uninterrupted(whole)
    example = _example(tmp_path / "killed", "dpo", 20, write_delay="1", prepared=whole)
    assert _killed_twice_noticed_and_resumed(example, (4, 12), 16) == reference


def test_grpo_killed_twice_and_stopped_regenerates_the_same_rollouts_and_adapter(tmp_path):
    """32 steps, 16 per epoch (8 prompts, 4 generations each, 2 rows a step), saves every 4:
    killed at 8 (epoch 1) and 20 (epoch 2), stopped past 24 (epoch 2). Each restored attempt
    generates the rollouts the uninterrupted run generated: the rewards logged at every step
    are the same."""
    whole = _example(tmp_path / "whole", "grpo", 32)
    reference = _uninterrupted(whole)
    example = _example(tmp_path / "killed", "grpo", 32, write_delay="1", prepared=whole)
    assert _killed_twice_noticed_and_resumed(example, (8, 20), 24) == reference
    curves = _reward_curves(example, "killed")
    assert [step for step, _ in curves["reward"]] == list(range(1, 33))
    assert curves == _reward_curves(whole, "whole")
    # and each save both runs still list (retention keeps the newest) recorded the same reward
    saved = [_saved_rewards(run, key) for run, key in ((example, "killed"), (whole, "whole"))]
    both = saved[0].keys() & saved[1].keys()
    assert both and {s: saved[0][s] for s in both} == {s: saved[1][s] for s in both}


def _reward_curves(example: Example, key: str) -> dict[str, list]:
    """The reward and each reward function's mean at every logged step of the train stage, as
    `nodus runs plot` draws them (the path that led to the final save: repeated steps once)."""
    with Client(example.home, read_only=True) as client:
        (train,) = [s for s in client.metrics(key) if s["stage"] == TRAIN]
    return {
        name: curve
        for name, curve in train["curves"].items()
        if name == "reward" or name.startswith("rewards/")
    }


def _saved_rewards(example: Example, key: str) -> dict[int, float]:
    return {s["step"]: s["metrics"]["reward"] for s in example.train_snapshots(key)}
