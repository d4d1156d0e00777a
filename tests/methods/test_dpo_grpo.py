"""dpo and grpo from their examples: trained, saved with their metrics, exported, resumed."""

from __future__ import annotations

import json
import re

import pytest
from methods_helpers import Example, adapter_hash

from nodus.client import Client
from nodus.ui import pages
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]
# The tests of the session's grpo run share one xdist worker: it is trained once.
on_grpo_run = pytest.mark.xdist_group("grpo_run")


def train_snapshots(example: Example, key: str) -> list[dict]:
    listing = example.nodus("runs", "snapshots", key, "--json")
    assert listing.returncode == 0, listing.stderr
    return [s for s in json.loads(listing.stdout) if s["stage"] == "train"]


def test_dpo_example_trains_with_loss_per_snapshot_and_exports(dpo_run):
    from transformers import AutoModelForCausalLM

    assert dpo_run.get("whole")["phase"] == "SUCCEEDED"
    snapshots = train_snapshots(dpo_run, "whole")
    assert [s["step"] for s in snapshots][-1] == 12
    assert all("loss" in s["metrics"] for s in snapshots)
    AutoModelForCausalLM.from_pretrained(dpo_run.outputs("whole") / "out" / "model")


@on_grpo_run
def test_grpo_saves_on_generation_boundaries_with_reward_metrics(grpo_run):
    from transformers import AutoModelForCausalLM

    view = grpo_run.get("whole")
    assert view["phase"] == "SUCCEEDED"
    (aligned,) = [e for e in view["events"] if e["type"] == "checkpoint_every_aligned"]
    assert (aligned["asked"], aligned["used"]) == (3, 4)
    snapshots = train_snapshots(grpo_run, "whole")
    assert [s["step"] for s in snapshots] == [4, 8, 12]
    for snapshot in snapshots:
        assert {"reward", "rewards/digits/mean", "rewards/short/mean"} <= set(snapshot["metrics"])
    AutoModelForCausalLM.from_pretrained(grpo_run.outputs("whole") / "out" / "model")


@on_grpo_run
def test_grpo_killed_twice_regenerates_the_same_rollouts_and_adapter(grpo_run, tmp_path):
    example = Example(tmp_path, "grpo", write_delay="0.5")
    runner = example.start("run", str(example.file), "--key", "killed")
    example.kill_after_save("killed", 1, 4, runner)
    example.kill_after_save("killed", 2, 8, runner)
    wait_for(lambda: runner.poll() is not None, "the killed run to finish", timeout=600)
    assert runner.returncode == 0, runner.log_path.read_text()[-3000:]
    assert [a["number"] for a in example.attempts("killed")] == [1, 2, 3]
    assert adapter_hash(example.outputs("killed")) == adapter_hash(grpo_run.outputs("whole"))
    rewards = [s["metrics"]["reward"] for s in train_snapshots(example, "killed")]
    assert rewards == [s["metrics"]["reward"] for s in train_snapshots(grpo_run, "whole")]


@on_grpo_run
def test_grpo_metrics_page_draws_each_reward_component_a_point_per_logged_step(grpo_run):
    components = {
        name
        for snapshot in train_snapshots(grpo_run, "whole")
        for name in snapshot["metrics"]
        if re.fullmatch(r"rewards/.+/mean", name)
    }
    assert components == {"rewards/digits/mean", "rewards/short/mean"}  # rewards.py's two
    with Client(grpo_run.home, read_only=True) as client:
        (train,) = [s for s in client.metrics("whole") if s["stage"] == "train"]
        page = pages.metrics_page(client, "whole", None)
    charts = dict(
        re.findall(r'<figure class="chart" data-metric="([^"]+)"(.*?)</figure>', page.live)
    )
    for name in ["reward", *sorted(components)]:
        steps = [step for step, _ in train["curves"][name]]
        assert steps == list(range(1, 13)), name  # max_steps 12, each step logged
        assert charts[name].count('<circle class="pt"') == len(steps), name
    # the reward and its parts first, before the metrics cut from the page (listed by name)
    assert list(charts)[:4] == ["loss", "reward", *sorted(components)]
    assert "entropy" not in charts and "entropy" in page.live
