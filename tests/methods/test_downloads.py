"""``--artifact model`` of a LoRA checkpoint: the adapter merged into the run's recorded base
model, refused when that base model is gone or changed, and torch never imported otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import nodus
from nodus.errors import NotFoundError, UsageError
from nodus.schemas import defaults

pytestmark = [pytest.mark.hf]


@pytest.mark.slow
@pytest.mark.xdist_group("sft_run")  # with the other tests of the session's sft run
def test_a_lora_checkpoint_downloads_as_a_merged_model_that_generates(sft_run, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, adapter_dir = tmp_path / "model", tmp_path / "adapter"
    for artifact, target in (("model", model_dir), ("adapter", adapter_dir)):
        proc = sft_run.nodus(
            "snapshots", "download", "sft@12", "--artifact", artifact, "--to", str(target)
        )
        assert proc.returncode == 0, proc.stderr
    merged = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer("3 + 4 =", return_tensors="pt")
    generated = merged.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] == prompt["input_ids"].shape[1] + 4
    base = AutoModelForCausalLM.from_pretrained(sft_run.code / "base")
    tuned = PeftModel.from_pretrained(base, adapter_dir)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.allclose(tuned(ids).logits, merged(ids).logits, atol=1e-5)
        assert not torch.allclose(tuned.get_base_model()(ids).logits, merged(ids).logits)
    assert set(os.listdir(tmp_path)) == {"model", "adapter"}  # nothing of the merge left


@pytest.mark.slow
@pytest.mark.xdist_group("sft_run")
def test_a_merge_is_refused_when_the_base_model_is_gone_or_changed(sft_run, tmp_path):
    """The session's sft run's base model changed, then moved away, then put back: it is left
    as it was for the other tests of that run."""
    from transformers import AutoModelForCausalLM

    client = nodus.Client(sft_run.home)
    base = sft_run.code / "base"
    extra = base / "notes.txt"
    extra.write_text("a file the run was not accepted with")
    try:
        with pytest.raises(UsageError, match="content changed since") as changed:
            client.download("sft@24", tmp_path / "changed")
    finally:
        extra.unlink()
    assert "--artifact adapter" in str(changed.value)
    base.rename(tmp_path / "moved")
    try:
        with pytest.raises(NotFoundError, match=f"base model {base}, which is gone"):
            client.download("sft@24", tmp_path / "gone")
    finally:
        (tmp_path / "moved").rename(base)
    assert not any(name.startswith(".nodus-merge-") for name in os.listdir(tmp_path))
    # A catalog that never saw the run finds its base model in the store's run record.
    snapshot = client.snapshots("sft")[-1]["id"]
    stranger = nodus.Client(tmp_path / "other-home", defaults.store_url(None, str(sft_run.home)))
    written = stranger.download(snapshot, tmp_path / "merged")
    assert "model.safetensors" in written["files"] and written["artifact"] == "model"
    AutoModelForCausalLM.from_pretrained(tmp_path / "merged")


def test_the_command_line_imports_no_torch_peft_or_transformers():
    code = (
        "import sys, nodus.cli, nodus.client, nodus.inventory.download, nodus.inventory.merging; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'peft', 'transformers', 'trl')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout.replace("'", '"')) == []
