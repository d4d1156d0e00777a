"""`nodus snapshots download` and `nodus runs outputs`: verified files a user can load."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from snapshot_helpers import COUNTER_STEPS, HF_STEPS, NODUS, PROGRAMS, QUICKSTART, Home

# Outside the quick tier: the session's real runs (a Trainer, a killed counter) and downloads.
pytestmark = [
    pytest.mark.slow,
    # with the other tests of the session's `hf_run` and `counter_run`: each is made once
    pytest.mark.xdist_group("inventory_runs"),
]


def test_model_download_loads_with_from_pretrained_and_generates(hf_run, tmp_path):
    target = tmp_path / "model"
    proc = hf_run.home.nodus(
        "snapshots", "download", f"{hf_run.run_id}@{HF_STEPS}", "--to", str(target)
    )
    assert proc.returncode == 0, proc.stderr
    names = sorted(os.listdir(target))
    assert "model.safetensors" in names and "config.json" in names and "tokenizer.json" in names
    assert not {"optimizer.pt", "scheduler.pt", "trainer_state.json"} & set(names)
    assert proc.stdout == ""  # not a terminal: quiet, the note goes to stderr only

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(target)
    tokenizer = AutoTokenizer.from_pretrained(target)
    prompt = tokenizer("the quick", return_tensors="pt")
    output = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert output.shape[1] == prompt["input_ids"].shape[1] + 5
    assert isinstance(tokenizer.decode(output[0]), str)


def test_resumable_download_resumes_a_bare_trainer_to_the_same_weights(hf_run, tmp_path):
    checkpoint = tmp_path / "resumable"
    proc = hf_run.home.nodus(
        "snapshots",
        "download",
        f"{hf_run.run_id}@12",
        "--to",
        str(checkpoint),
        "--artifact",
        "resumable",
    )
    assert proc.returncode == 0, proc.stderr
    assert {
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        "model.safetensors",
    } <= set(os.listdir(checkpoint))
    work = tmp_path / "bare"
    shutil.copytree(QUICKSTART, work)
    env = dict(os.environ, RESUME_FROM=str(checkpoint), QUICKSTART_MAX_STEPS=str(HF_STEPS))
    bare = subprocess.run(
        [sys.executable, str(PROGRAMS / "bare_resume.py")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bare.returncode == 0, bare.stderr[-3000:]
    assert (work / "out" / "global_step").read_text() == str(HF_STEPS)
    # Step 12 ends epoch 0, where a bare resume is exact: it ends with the run's own weights.
    outputs = tmp_path / "outputs"
    assert hf_run.home.nodus("runs", "outputs", hf_run.run_id, "--to", str(outputs)).returncode == 0
    assert _tensors(work / "out" / "model") == _tensors(outputs / "out" / "model")


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {
        name: tensor.tolist() for name, tensor in load_file(folder / "model.safetensors").items()
    }


def test_adapter_download_is_refused_when_the_snapshot_holds_none(hf_run, tmp_path):
    proc = hf_run.home.nodus(
        "snapshots",
        "download",
        f"{hf_run.run_id}@6",
        "--to",
        str(tmp_path / "adapter"),
        "--artifact",
        "adapter",
    )
    assert proc.returncode == 2
    assert "no LoRA adapter" in proc.stderr and "--artifact model" in proc.stderr
    assert not (tmp_path / "adapter").exists() or not os.listdir(tmp_path / "adapter")


def test_download_into_a_folder_that_holds_files_is_refused(hf_run, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    proc = hf_run.home.nodus("snapshots", "download", f"{hf_run.run_id}@6", "--to", str(tmp_path))
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_progress_bar_is_drawn_on_a_terminal_only(hf_run, tmp_path):
    main, side = os.openpty()
    try:
        proc = subprocess.run(
            [
                *NODUS,
                "snapshots",
                "download",
                f"{hf_run.run_id}@6",
                "--to",
                str(tmp_path / "a"),
                "--artifact",
                "resumable",
            ],
            env=hf_run.home.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=side,
            timeout=120,
        )
        os.close(side)
        side = -1
        shown = _drain(main)
    finally:
        os.close(main)
        if side != -1:
            os.close(side)
    assert proc.returncode == 0
    assert "100%" in shown and "[" + "#" * 30 + "]" in shown
    quiet = hf_run.home.nodus(
        "snapshots",
        "download",
        f"{hf_run.run_id}@6",
        "--to",
        str(tmp_path / "b"),
        "--artifact",
        "resumable",
    )
    assert quiet.returncode == 0 and "%" not in quiet.stderr


def _drain(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def test_runs_outputs_returns_the_files_the_program_wrote(counter_run, tmp_path):
    from nodus.testing.counter import expected_value

    target = tmp_path / "outputs"
    proc = counter_run.home.nodus("runs", "outputs", counter_run.key, "--to", str(target), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["files"] == ["out/result.json"]
    result = json.loads((target / "out" / "result.json").read_text())
    # Killed once and recovered, the program still ends where an uninterrupted one would.
    assert result["value"] == expected_value(COUNTER_STEPS)


def test_runs_outputs_of_a_run_without_outputs_is_refused(tmp_path):
    from nodus.runner.catalog.core import Catalog

    home = Home(tmp_path / "home")
    run_id = Catalog(str(home.path)).create_run(
        name="none",
        workload={"stages": [{"name": "main", "outputs": []}]},
        store=home.store_url,
        key=None,
        lock_name="none",
        stage_names=["main"],
    )
    proc = home.nodus("runs", "outputs", run_id, "--to", str(tmp_path / "o"))
    assert proc.returncode == 2 and "no committed outputs" in proc.stderr
