"""sft from its example: trained, exported, downloaded and loaded (killed twice and resumed
bit-identically: test_recovery.py)."""

from __future__ import annotations

import pytest

# Every test here uses the session's sft run, trained once: they share one xdist worker (with
# test_downloads' tests of that run and test_recovery's sft scenario).
pytestmark = [pytest.mark.hf, pytest.mark.slow, pytest.mark.xdist_group("sft_run")]


def test_the_example_trains_saves_with_metrics_and_exports_a_model_that_generates(sft_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    view = sft_run.get("sft")
    assert view["phase"] == "SUCCEEDED"
    listing = sft_run.nodus("runs", "snapshots", "sft", "--json")
    snapshots = __import__("json").loads(listing.stdout)
    assert [s["step"] for s in snapshots if s["stage"] == "train"][-1] == 24
    assert all("loss" in s["metrics"] for s in snapshots if s["stage"] == "train")
    model_dir = sft_run.outputs("sft") / "out" / "model"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer("3 + 4 =", return_tensors="pt")
    generated = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] == prompt["input_ids"].shape[1] + 4


def test_the_train_stage_final_save_is_the_runs_registered_model(sft_run):
    import json

    model = sft_run.get("sft")["model"]
    assert model is not None, "a succeeded sft run registers its model"
    listed = json.loads(sft_run.nodus("models", "list", "--json").stdout)
    ours = [v for v in listed if v["run_model"]]
    assert len(ours) == 1 and ours[0]["ref"] == model["ref"]
    assert (ours[0]["stage"], ours[0]["step"]) == ("train", 24)
    snapshots = json.loads(sft_run.nodus("runs", "snapshots", "sft", "--json").stdout)
    final = next(s for s in snapshots if s["stage"] == "train" and s["step"] == 24)
    assert ours[0]["snapshot"] == final["id"]


def test_the_adapter_downloads_and_loads_on_the_base_model(sft_run, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    target = tmp_path / "adapter"
    proc = sft_run.nodus(
        "snapshots", "download", "sft@24", "--artifact", "adapter", "--to", str(target)
    )
    assert proc.returncode == 0, proc.stderr
    base = AutoModelForCausalLM.from_pretrained(sft_run.code / "base")
    tuned = PeftModel.from_pretrained(base, target)
    merged = AutoModelForCausalLM.from_pretrained(sft_run.outputs("sft") / "out" / "model")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(tuned(ids).logits, merged(ids).logits, atol=1e-5)


def test_a_continuation_changing_a_training_argument_is_refused_at_submit(sft_run):
    """`--resume-from` with another learning rate: refused before anything is recorded (exit 2),
    naming the field and both values, instead of failing once the restored attempt starts."""
    text = sft_run.file.read_text().replace("learning_rate = 1e-3", "learning_rate = 2e-3")
    child = sft_run.code / "faster.toml"
    child.write_text(text.replace("max_steps = 24", "max_steps = 30"))
    runs = sft_run.nodus("runs", "list", "--json").stdout
    proc = sft_run.nodus("run", str(child), "--resume-from", "sft@12")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "method.learning_rate: 0.002 — a run that continues another's training state keeps " in (
        proc.stderr
    )
    assert "the source run has 0.001" in proc.stderr
    assert sft_run.nodus("runs", "list", "--json").stdout == runs  # nothing was recorded
