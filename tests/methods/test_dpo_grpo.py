"""dpo and grpo from their examples: trained, saved with their metrics, exported (their
recoveries: test_recovery.py)."""

from __future__ import annotations

import re

import pytest

from nodus.client import Client
from nodus.ui import pages

pytestmark = [pytest.mark.hf, pytest.mark.slow]
# The tests of the session's grpo run share one xdist worker: it is trained once.
on_grpo_run = pytest.mark.xdist_group("grpo_run")


def test_dpo_example_trains_with_loss_per_snapshot_and_exports(dpo_run):
    from transformers import AutoModelForCausalLM

    assert dpo_run.get("dpo")["phase"] == "SUCCEEDED"
    snapshots = dpo_run.train_snapshots("dpo")
    assert [s["step"] for s in snapshots][-1] == 12
    assert all("loss" in s["metrics"] for s in snapshots)
    AutoModelForCausalLM.from_pretrained(dpo_run.outputs("dpo") / "out" / "model")


@on_grpo_run
def test_grpo_saves_on_generation_boundaries_with_reward_metrics(grpo_run):
    from transformers import AutoModelForCausalLM

    view = grpo_run.get("grpo")
    assert view["phase"] == "SUCCEEDED"
    (aligned,) = [e for e in view["events"] if e["type"] == "checkpoint_every_aligned"]
    assert (aligned["asked"], aligned["used"]) == (3, 4)
    snapshots = grpo_run.train_snapshots("grpo")
    assert [s["step"] for s in snapshots] == [4, 8, 12]
    for snapshot in snapshots:
        assert {"reward", "rewards/digits/mean", "rewards/short/mean"} <= set(snapshot["metrics"])
    AutoModelForCausalLM.from_pretrained(grpo_run.outputs("grpo") / "out" / "model")


@on_grpo_run
def test_grpo_metrics_page_draws_each_reward_component_a_point_per_logged_step(grpo_run):
    components = {
        name
        for snapshot in grpo_run.train_snapshots("grpo")
        for name in snapshot["metrics"]
        if re.fullmatch(r"rewards/.+/mean", name)
    }
    assert components == {"rewards/digits/mean", "rewards/short/mean"}  # rewards.py's two
    with Client(grpo_run.home, read_only=True) as client:
        (train,) = [s for s in client.metrics("grpo") if s["stage"] == "train"]
        page = pages.metrics_page(client, "grpo", None)
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
