"""A framework shortcut resolves to generated stages, and every refusal says why (cheap: no
training, a base-model folder holding only its config)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodus import protocol
from nodus.errors import WorkloadError
from nodus.schemas.loader import resolve_file
from scheduling import ML_IN_PROCESS


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    rows = {
        "text.jsonl": {"text": "a"},
        "pairs.jsonl": {"prompt": "p", "chosen": "c", "rejected": "r"},
        "prompts.jsonl": {"prompt": "p"},
    }
    for name, row in rows.items():
        (tmp_path / name).write_text(json.dumps(row) + "\n")
    (tmp_path / "rewards.py").write_text("def length(prompts, completions, **kw): return [0.0]\n")
    return tmp_path


def workload(framework: str, dataset: str, extra: str = "", top: str = "") -> str:
    return textwrap.dedent(
        f"""\
        name = "m"
        framework = "{framework}"
        {top}
        [method]
        base_model = "base"
        dataset = "{dataset}"
        max_steps = 10
        """
    ) + textwrap.dedent(extra)


def resolve(folder: Path, text: str):
    path = folder / "workload.toml"
    path.write_text(text)
    return resolve_file(path)


def refused(folder: Path, text: str) -> list[str]:
    with pytest.raises(WorkloadError) as caught:
        resolve(folder, text)
    assert caught.value.exit_status == 2
    return [problem.render() for problem in caught.value.problems]


def test_sft_resolves_to_train_and_export_stages(folder):
    extra = "lora_rank = 4\ncheckpoint_every = 5\ncheckpoint_keep = 2\n"
    resolved = resolve(folder, workload("sft", "text.jsonl", extra))
    train, export = resolved.stages
    assert (train.name, export.name) == ("train", "export")
    assert train.command[1:] == ("-m", protocol.METHOD_TRAIN_PROGRAM)
    assert train.integration == "hf-trainer-v1" and export.integration is None
    assert (train.execution.save_every, train.execution.keep_recoverable) == (5, 2)
    assert train.execution.keep_adapters == 2
    assert train.outputs == (protocol.METHOD_TRAINED_DIR,)
    assert export.outputs == ("model",) and export.command[-1] == "model"
    assert export.continuity.mode == "restartable"
    method = json.loads(train.env[protocol.ENV_METHOD])
    assert method == resolved.method and resolved.framework == "sft"
    assert method["base_model"] == str(folder / "base")
    assert method["dataset_fingerprint"].startswith("xxh3-128:")
    assert method["base_model_fingerprint"].startswith("xxh3-128:")
    assert (method["lora_rank"], method["lora_alpha"], method["learning_rate"]) == (4, 16.0, 2e-5)


def test_grpo_checkpoint_every_is_aligned_to_a_generation_boundary(folder):
    extra = (
        'reward_functions = ["rewards:length"]\nbatch_size = 2\nnum_generations = 4\n'
        "checkpoint_every = 3\n"
    )
    resolved = resolve(folder, workload("grpo", "prompts.jsonl", extra))
    assert resolved.stages[0].execution.save_every == 4
    assert resolved.method["generation_every"] == 2
    assert resolved.method["checkpoint_every"] == 3


@ML_IN_PROCESS
def test_saved_dataset_folders_and_parquet_files_are_read(folder):
    import datasets

    data = datasets.Dataset.from_list([{"prompt": "p", "completion": "c"}])
    data.save_to_disk(str(folder / "saved"))
    data.to_parquet(str(folder / "rows.parquet"))
    for name in ("saved", "rows.parquet"):
        method = resolve(folder, workload("sft", name)).method
        assert method["dataset_columns"] == ["prompt", "completion"]


@pytest.mark.parametrize(
    "framework, dataset, extra, top, line",
    [
        (
            "sft",
            "text.jsonl",
            "load_in_4bit = true\n",
            "",
            "method.load_in_4bit: True — needs bitsandbytes, which is not installed",
        ),
        (
            "sft",
            "text.jsonl",
            "gpu_count = 2\n",
            "",
            "method.gpu_count: 2 — training on more than one device is not supported yet",
        ),
        (
            "dpo",
            "text.jsonl",
            "",
            "",
            "method.dataset: 'text.jsonl' — dpo needs the column(s) 'prompt'/'chosen'/'rejected'",
        ),
        ("sft", "missing.jsonl", "", "", "method.dataset: 'missing.jsonl' — no such file"),
        (
            "grpo",
            "prompts.jsonl",
            'reward_functions = ["nowhere:f"]\n',
            "",
            "method.reward_functions[0]: 'nowhere:f' — module 'nowhere' is not in the source",
        ),
        (
            "sft",
            "text.jsonl",
            "lora_alpha = 8\n",
            "",
            "method.lora_alpha: 8.0 — has no effect without lora_rank",
        ),
        ("sft", "text.jsonl", "num_generations = 4\n", "", "method.num_generations: 4 — used by"),
        (
            "sft",
            "text.jsonl",
            "lora_rnk = 4\n",
            "",
            "method.lora_rnk: unknown key 'lora_rnk'; did you mean 'lora_rank'?",
        ),
        (
            "sft",
            "text.jsonl",
            "",
            'command = ["python", "train.py"]',
            "command: ['python', 'train.py'] — cannot be written next to a framework shortcut",
        ),
        (
            "sft",
            "text.jsonl",
            "",
            'outputs = ["a", "b"]',
            "outputs: ['a', 'b'] — a framework shortcut exports its model into one folder",
        ),
        (
            "sft",
            "text.jsonl",
            "[execution]\nsave_every = 3\n",
            "",
            "execution.save_every: 3 — a framework shortcut sets it from [method] checkpoint_every",
        ),
        (
            "sft",
            "text.jsonl",
            '[[stages]]\nname = "extra"\ncommand = ["python", "x.py"]\n',
            "",
            "stages[0]: 'extra' — a framework shortcut generates its stages",
        ),
    ],
)
def test_refusals_name_the_key_the_value_and_why(folder, framework, dataset, extra, top, line):
    problems = refused(folder, workload(framework, dataset, extra, top))
    assert any(problem.startswith(line) for problem in problems), problems


def test_nodus_validate_refuses_without_a_traceback(folder):
    path = folder / "workload.toml"
    path.write_text(workload("dpo", "text.jsonl"))
    proc = subprocess.run(
        [sys.executable, "-m", "nodus", "validate", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "dpo needs the column(s)" in proc.stderr and "Traceback" not in proc.stderr
