"""Issue 28 point 1e: a PEFT model (LoRA adapters) under the plain Trainer, under `nodus run`.

``programs/peft_lora.py`` wraps the quick-start's model with ``get_peft_model``. The integration
saves what the Trainer itself saves for a PEFT model (``adapter_model.safetensors`` and
``adapter_config.json``, not the base model), resumes from it bit-identically, and the adapter
is the snapshot's ``weights`` kind: retention keeps it like a model's weights, and
``--artifact adapter`` downloads it for ``PeftModel.from_pretrained`` on the base model. A
checkpoint records its LoRA configuration, and a resume with another is refused naming both.
Last, in this process: a save of a PEFT model, a bfloat16 model and bf16 autocast holds the
files ``Trainer._save_checkpoint`` writes for each.
"""

from __future__ import annotations

import importlib.util
import json
import random

import pytest
import tomli_w
from hf_helpers import PROGRAMS, QUICKSTART, bare_run_hash
from runner_e2e_helpers import Project

from nodus.schemas.defaults import ENV_IGNORE_SHIPPED_QUALIFICATIONS as IGNORE_SHIPPED
from nodus.stages.hf import qualification
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROGRAM = "peft_lora.py"
# 3 epochs of 12 steps; saves every 5 and at the epoch ends 12, 24 and 36
ENV = {"QUICKSTART_EPOCHS": "3"}
# The tests of the module's killed run share one xdist worker: it is run once.
on_peft_run = pytest.mark.xdist_group("peft_run")
ADAPTER = ["adapter_config.json", "adapter_model.safetensors"]


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> str:
    """The adapters of the uninterrupted bare run."""
    return bare_run_hash(tmp_path_factory.mktemp("bare-peft"), str(PROGRAMS / PROGRAM), ENV)


@pytest.fixture(scope="module")
def peft_run(tmp_path_factory) -> tuple[Project, str, tuple[int, ...]]:
    """Killed twice at random, paused with a save, resumed; tight retention."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    first = rng.choice([5, 10])  # inside epoch 0
    second = rng.choice([12, 15])  # at its end, inside epoch 1
    pause = rng.choice([20, 24])  # a pause asked then lands well before the end (36)
    why = f"random seed {seed}: killed after {first} and {second}, paused after {pause}"
    project = Project(
        tmp_path_factory.mktemp("peft"),
        program=PROGRAM,
        env=ENV,
        save_every=5,
        write_delay="0.5",
        keep_recoverable=1,
        keep_adapters=1,
    )
    runner = project.start("run", str(project.file), "--key", "p")
    project.kill_after_save("p", 1, first, runner)
    project.kill_after_save("p", 2, second, runner)
    wait_for(lambda: pause in project.committed_steps("p", 3), f"step {pause} committed", runner)
    paused = project.nodus("runs", "pause", "p", "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=300) == 3, why  # PAUSED
    paused_at = project.committed_steps("p", 3)[-1]  # retention may delete it later
    resumed = project.nodus("runs", "resume", "p", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return project, why, (first, second, paused_at)


@on_peft_run
def test_peft_killed_twice_and_paused_ends_with_the_bare_adapters(peft_run, bare, tmp_path):
    project, why, kills = peft_run
    attempts = project.get("p")["stages"][0]["attempts"]
    outcomes = [a["outcome"] for a in attempts]
    assert outcomes == ["lost", "lost", "paused", "succeeded"], why
    assert [a["restored_step"] for a in attempts[1:]] == list(kills), why
    assert project.outputs_hash("p") == bare, why
    # what the Trainer writes for a PEFT model: the adapter, never the base model
    outputs = tmp_path / "outputs"
    assert project.nodus("runs", "outputs", "p", "--to", str(outputs)).returncode == 0
    saved = sorted(p.name for p in (outputs / "out" / "model").iterdir())
    assert set(ADAPTER) <= set(saved) and "model.safetensors" not in saved, saved


@on_peft_run
def test_retention_keeps_adapters_as_weights_that_load_on_the_base_model(peft_run, tmp_path):
    import torch
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file

    project, why, _ = peft_run
    snapshots = {m.step: m for m in project.snapshots("p")}
    # keep_recoverable = 1: the two newest hold their training state; the epoch saves keep
    # their adapter as their weights, and nothing else
    assert snapshots[36].kinds == snapshots[35].kinds == ("weights", "state", "files"), why
    assert snapshots[12].kinds == snapshots[24].kinds == ("weights",), why
    target = tmp_path / "adapter-12"
    download = ("snapshots", "download", "p@12", "--to", str(target))
    proc = project.nodus(*download, "--artifact", "adapter")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in target.iterdir()) == ADAPTER
    loaded = PeftModel.from_pretrained(_base_model(), str(target))
    stored = load_file(str(target / "adapter_model.safetensors"))
    adapter = get_peft_model_state_dict(loaded)
    assert sorted(adapter) == sorted(stored)
    assert all(torch.equal(adapter[name], stored[name]) for name in stored)

    state = project.nodus(*download[:-1], str(tmp_path / "r"), "--artifact", "resumable")
    assert state.returncode != 0 and "no longer holds its training state" in state.stderr
    model = project.nodus(*download[:-1], str(tmp_path / "m"), "--artifact", "model")
    assert model.returncode != 0
    assert "is not a managed method" in model.stderr and "--artifact adapter" in model.stderr


@on_peft_run
def test_a_resume_with_another_lora_config_is_refused_naming_both(peft_run):
    project, _why, _ = peft_run
    file = _child(project, "rank8", resume_from="p@35", env={"LORA_R": "8"})
    proc = project.nodus("run", file, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (event,) = [e for e in _newest(project)["events"] if e["type"] == "integration_refused"]
    (line,) = [r for r in event["reasons"] if r.startswith("PEFT adapters differs")]
    saved, now = line.split("checkpoint has ")[1].split(", this attempt has ")
    assert saved.startswith("'default sha256:") and now.startswith("'default sha256:")
    assert saved != now, line


@on_peft_run
def test_a_full_state_branch_of_a_peft_run_ends_bit_identical(peft_run, bare):
    project, _why, _ = peft_run
    proc = project.nodus("runs", "branch", "p@35", "--from", "full-state", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    child = _newest(project)
    assert child["phase"] == "SUCCEEDED" and child["parent"]["step"] == 35
    assert project.committed_steps(child["id"]) == [36]
    assert project.outputs_hash(child["id"]) == bare


def test_unqualified_peft_is_refused_naming_the_command_that_qualifies_it(tmp_path):
    project = Project(tmp_path, program=PROGRAM, env={"QUICKSTART_MAX_STEPS": "2"})
    versions = qualification.current_versions()
    qualification.record_result(str(project.home), versions, True, {})  # the v1 profile's
    own = {IGNORE_SHIPPED: "1"}  # only this machine's records count: none for the extension
    refused = project.nodus("run", str(project.file), "--key", "u", env=own, timeout=300)
    assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
    (event,) = [e for e in project.get("u")["events"] if e["type"] == "integration_refused"]
    assert event["reasons"] == [
        "PEFT model (PeftModel) needs the hf-trainer-v1 extension 'peft', not "
        f"qualified on cpu with {qualification.describe(versions)}; run `nodus qualify "
        "--extension peft` on this machine to qualify it"
    ]


def _base_model():
    """The program's base model: the quick-start's, built from the same seed."""
    from transformers import set_seed

    module = _quickstart()
    set_seed(42)
    return module.build_model(module.build_tokenizer())


def _child(project: Project, name: str, **changes) -> str:
    """The run's workload file with ``changes`` (top-level keys; ``env`` merged)."""
    import tomllib

    workload = tomllib.loads(project.file.read_text())
    del workload["execution"]["save_each_epoch"]  # a continuation makes no epoch-end saves
    env = {**workload["env"], **changes.pop("env", {})}
    workload.update(changes, env=env)
    path = project.root / f"{name}.toml"
    path.write_text(tomli_w.dumps(workload))
    return str(path)


def _newest(project: Project) -> dict:
    runs = json.loads(project.nodus("runs", "list", "--json").stdout)
    return project.get(runs[0]["id"])


@pytest.mark.parametrize("kind", ["peft", "bf16-model", "bf16"])
def test_a_save_writes_the_files_the_trainer_writes_for_it(kind, tmp_path):
    """The integration's checkpoint of a PEFT model, a bfloat16 model and bf16 autocast holds
    the files of ``Trainer._save_checkpoint`` at the same step, their tensors equal (dtypes
    included), and the integration's identity record besides."""
    import dataclasses
    import os

    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import Trainer, set_seed

    from nodus import protocol
    from nodus.stages.hf.inprocess.state_copy import capture
    from nodus.stages.hf.inprocess.writer import CheckpointWriter

    module = _quickstart()
    tokenizer = module.build_tokenizer()
    args = dataclasses.replace(
        module.training_arguments(), output_dir=str(tmp_path / "trainer"), max_steps=2
    )
    if kind == "bf16":
        args = dataclasses.replace(args, bf16=True)
    set_seed(42)
    model = module.build_model(tokenizer)
    if kind == "peft":
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"]))
    elif kind == "bf16-model":
        model = model.to(torch.bfloat16)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=module.build_dataset(tokenizer),
        processing_class=tokenizer,
    )
    trainer.train()
    trainer._save_checkpoint(trainer.model, None)
    theirs = tmp_path / "trainer" / protocol.checkpoint_folder(2)
    ours = tmp_path / "ours"
    ours.mkdir()
    writer = CheckpointWriter(None, trainer, on_published=lambda step: None)
    writer._write_files(str(ours), capture(trainer, {}, []))

    names = sorted(os.listdir(theirs))
    assert sorted(os.listdir(ours)) == sorted([*names, "nodus-identity.json"])
    weights = [n for n in names if n.endswith(".safetensors")]
    assert weights == (["adapter_model.safetensors"] if kind == "peft" else ["model.safetensors"])
    for name in weights:
        a, b = load_file(str(theirs / name)), load_file(str(ours / name))
        assert sorted(a) == sorted(b)
        assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a), name
    if kind == "bf16-model":
        assert {v.dtype for v in load_file(str(ours / "model.safetensors")).values()} == {
            torch.bfloat16
        }


def _quickstart():
    spec = importlib.util.spec_from_file_location("quickstart_train", QUICKSTART / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
