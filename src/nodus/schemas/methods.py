"""Framework shortcuts: the stages a ``[method]`` table generates, and its resolved settings.

``framework = "sft" | "dpo" | "grpo"`` with a ``[method]`` table becomes two stages:

- ``train`` runs ``python -m nodus.stages.methods.train`` under ``hf-trainer-v1`` (the method
  profile): ``checkpoint_every`` is its ``save_every``, ``checkpoint_keep`` its
  ``keep_recoverable`` and ``keep_adapters``; its output is ``trained/`` (final weights and
  tokenizer);
- ``export`` runs ``python -m nodus.stages.methods.export``: the merged model (and, with LoRA,
  the adapter) plus tokenizer into the workload's ``outputs``.

Both read the resolved settings (:func:`resolve_method`, every key explicit) from
``protocol.ENV_METHOD``; the run stores the same dict as ``ResolvedWorkload.method``, which the
continuation rules (:mod:`nodus.schemas.method_rules`) compare. Everything here is checked at
submit: paths exist, the dataset's columns (read from its first row or its schema), the reward
functions' modules in the source folder; the only reads of whole files are the dataset's and the
base model's fingerprints. docs/methods.md is the user's side of this.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from nodus import protocol
from nodus.errors import Problem
from nodus.schemas import defaults
from nodus.schemas.method_specs import (
    ONLINE_KEYS,
    MethodSpec,
    in_words,
    method_spec,
    online_methods,
)
from nodus.schemas.models import Framework, Method, Stage, Workload

__all__ = [
    "EXPORT_STAGE",
    "TRAIN_STAGE",
    "content_fingerprint",
    "dataset_columns",
    "generated_stages",
    "resolve_method",
]

TRAIN_STAGE = "train"
EXPORT_STAGE = "export"

LORA_ONLY = ("lora_alpha", "lora_dropout", "lora_target_modules")
_PARQUET = (".parquet", ".pq")
_JSONL = (".jsonl", ".json")


def resolve_method(
    framework: Framework, method: Method, base_dir: str, code: str
) -> tuple[dict[str, Any], list[Problem]]:
    """Every setting of the train and export programs, explicit; problems found on the way."""
    spec = _spec(framework)
    problems = [*_key_problems(spec, method)]
    base_model = _local_path(base_dir, method.base_model)
    dataset = _local_path(base_dir, method.dataset)
    base_problems = _base_model_problems(base_model, method.base_model)
    problems += base_problems
    columns, dataset_problems = _dataset_check(spec, dataset, method.dataset)
    problems += dataset_problems
    problems += _reward_problems(method.reward_functions or [], code)
    problems += _unsupported(method)
    resolved: dict[str, Any] = {
        "framework": spec.name,
        "base_model": base_model,
        "base_model_fingerprint": content_fingerprint(base_model) if not base_problems else "",
        "dataset": dataset,
        "dataset_fingerprint": content_fingerprint(dataset) if not dataset_problems else "",
        "dataset_columns": list(columns),
        "max_steps": method.max_steps,
        "num_epochs": method.num_epochs,
        "learning_rate": method.learning_rate or spec.learning_rate,
        "batch_size": method.batch_size,
        "gradient_accumulation_steps": method.gradient_accumulation_steps,
        "max_length": method.max_length or spec.max_length,
        "seed": method.seed,
        "lora_rank": method.lora_rank,
        "lora_alpha": _lora(method, "lora_alpha", defaults.METHOD_LORA_ALPHA),
        "lora_dropout": _lora(method, "lora_dropout", defaults.METHOD_LORA_DROPOUT),
        "lora_target_modules": method.lora_target_modules,
        "load_in_4bit": method.load_in_4bit,
        "gpu_count": method.gpu_count,
        "checkpoint_every": _given(method, "checkpoint_every", defaults.SAVE_EVERY),
        "checkpoint_keep": method.checkpoint_keep,
        **_online_settings(spec, method),
    }
    return resolved, problems


def _spec(framework: Framework) -> MethodSpec:
    spec = method_spec(framework)
    assert spec is not None, f"{framework}: every Framework has its MethodSpec"
    return spec


def _online_settings(spec: MethodSpec, method: Method) -> dict[str, Any]:
    """Generation settings: a generation covers whole optimizer steps (``generation_every``).

    TRL samples ``num_generations`` completions per prompt and needs each generation's batch
    (``batch_size × steps_per_generation`` micro-batch rows) to hold whole groups, so a
    generation spans the fewest whole optimizer steps that do. Saves then land only on those
    boundaries: the rollouts buffered inside a generation are never part of a checkpoint, and a
    resumed run generates exactly the rollouts an uninterrupted one would have.
    """
    if not spec.online:
        return dict.fromkeys(ONLINE_KEYS)
    generations = method.num_generations or defaults.METHOD_NUM_GENERATIONS
    rows_per_step = method.batch_size * method.gradient_accumulation_steps
    every = generations // math.gcd(rows_per_step, generations)
    return {
        "reward_functions": list(method.reward_functions or ()),
        "num_generations": generations,
        "kl_beta": defaults.METHOD_KL_BETA if method.kl_beta is None else method.kl_beta,
        "generation_every": every,
        "steps_per_generation": every * method.gradient_accumulation_steps,
    }


def save_every(resolved: dict[str, Any]) -> int:
    """``checkpoint_every`` as the train stage saves: for an online method (grpo), up to a
    generation boundary."""
    asked = int(resolved["checkpoint_every"])
    every = int(resolved.get("generation_every") or 1)
    return math.ceil(asked / every) * every


def generated_stages(workload: Workload, resolved: dict[str, Any]) -> list[Stage]:
    """The ``train`` and ``export`` stages, as if written in the file (the workload's own
    top-level values lie under them, as under any stage)."""
    method = workload.method
    execution: dict[str, Any] = {"save_every": save_every(resolved)}
    if method is not None and method.given("checkpoint_keep"):
        execution["keep_recoverable"] = method.checkpoint_keep
        execution["keep_adapters"] = method.checkpoint_keep
    python = sys.executable
    train = Stage.model_validate(
        {
            "name": TRAIN_STAGE,
            "command": [python, "-m", protocol.METHOD_TRAIN_PROGRAM],
            "integration": protocol.INTEGRATION_HF_TRAINER_V1,
            "outputs": [protocol.METHOD_TRAINED_DIR],
            "execution": execution,
        }
    )
    written = workload.outputs if workload.given("outputs") else None
    outputs = list(written if written is not None else defaults.METHOD_OUTPUTS)
    export = Stage.model_validate(
        {
            "name": EXPORT_STAGE,
            "command": [python, "-m", protocol.METHOD_EXPORT_PROGRAM, outputs[0]],
            "integration": "none",
            "continuity": "restartable",
            "outputs": outputs[:1],
        }
    )
    return [train, export]


def method_environment(resolved: dict[str, Any]) -> dict[str, str]:
    """The variable the generated stages read their settings from."""
    return {protocol.ENV_METHOD: json.dumps(resolved, sort_keys=True)}


# --- checks ------------------------------------------------------------------------------------


def _key_problems(spec: MethodSpec, method: Method) -> list[Problem]:
    problems = []
    if not spec.online:
        used_by = in_words(online_methods())
        for key in ONLINE_KEYS:
            if method.given(key):
                problems.append(
                    Problem(f"method.{key}", f"used by {used_by} only", getattr(method, key), True)
                )
    if not method.given("lora_rank"):
        for key in LORA_ONLY:
            if method.given(key):
                problems.append(
                    Problem(
                        f"method.{key}",
                        "has no effect without lora_rank (full weights are trained); "
                        "set lora_rank or remove it",
                        getattr(method, key),
                        True,
                    )
                )
    return problems


def _unsupported(method: Method) -> list[Problem]:
    problems = []
    if method.load_in_4bit:
        problems.append(Problem("method.load_in_4bit", _four_bit_reason(), True, True))
    if method.gpu_count > 1:
        problems.append(
            Problem(
                "method.gpu_count",
                "training on more than one device is not supported yet; set gpu_count = 1",
                method.gpu_count,
                True,
            )
        )
    return problems


def _four_bit_reason() -> str:
    """Why 4-bit loading is refused here: what is missing first, else what nodus lacks."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return "needs bitsandbytes, which is not installed; remove load_in_4bit"
    if not _gpu_present():
        return "needs a CUDA GPU, and this machine has none; remove load_in_4bit"
    return (
        "4-bit training is not supported yet (a quantized model cannot be saved and resumed "
        "bit-identically); remove load_in_4bit"
    )


def _gpu_present() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _local_path(base_dir: str, written: str) -> str:
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(written)))


def _base_model_problems(path: str, written: str) -> list[Problem]:
    if not os.path.isdir(path):
        return [Problem("method.base_model", f"not a local folder: {path}", written, True)]
    if not os.path.isfile(os.path.join(path, "config.json")):
        return [
            Problem(
                "method.base_model",
                f"{path} holds no config.json: give a folder written by save_pretrained "
                "(model and tokenizer)",
                written,
                True,
            )
        ]
    return []


def _dataset_check(
    spec: MethodSpec, path: str, written: str
) -> tuple[tuple[str, ...], list[Problem]]:
    """The column set the framework will read, or the problem naming what is missing."""
    try:
        columns = dataset_columns(path)
    except ValueError as error:
        return (), [Problem("method.dataset", str(error), written, True)]
    for wanted in spec.columns:
        if set(wanted) <= set(columns):
            return wanted, []
    options = " or ".join("/".join(f"'{c}'" for c in wanted) for wanted in spec.columns)
    return (), [
        Problem(
            "method.dataset",
            f"{spec.name} needs the column(s) {options}; {path} has {sorted(columns)}",
            written,
            True,
        )
    ]


def dataset_columns(path: str) -> list[str]:
    """The column names of a JSONL or Parquet file or a saved dataset folder (cheap: the first
    row or the stored schema). Raises ``ValueError`` saying what is wrong."""
    if os.path.isdir(path):
        return _saved_dataset_columns(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such file or folder: {path}")
    if path.endswith(_PARQUET):
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    if path.endswith(_JSONL):
        return _first_row_keys(path)
    raise ValueError(
        f"{path}: give a JSONL (.jsonl) or Parquet (.parquet) file, or a folder written by "
        "Dataset.save_to_disk"
    )


def _first_row_keys(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError as error:
                    raise ValueError(f"{path}: the first row is not JSON ({error})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}: rows must be JSON objects")
                return list(row)
    raise ValueError(f"{path} is empty")


def _saved_dataset_columns(path: str) -> list[str]:
    """A ``Dataset.save_to_disk`` folder (its ``dataset_info.json`` features), or a saved
    ``DatasetDict`` whose ``train`` split is one."""
    info = os.path.join(path, "dataset_info.json")
    if not os.path.isfile(info) and os.path.isdir(os.path.join(path, "train")):
        info = os.path.join(path, "train", "dataset_info.json")
    try:
        with open(info, encoding="utf-8") as handle:
            return list(json.load(handle).get("features") or {})
    except (OSError, ValueError):
        raise ValueError(
            f"{path} is not a saved dataset (no dataset_info.json); give a folder written by "
            "Dataset.save_to_disk, or a JSONL or Parquet file"
        ) from None


def _reward_problems(functions: list[str], code: str) -> list[Problem]:
    """Each ``module:function``'s module must be a file or package of the source folder."""
    problems = []
    for index, spec in enumerate(functions):
        module = spec.split(":", 1)[0]
        base = os.path.join(code, *module.split("."))
        if not (os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))):
            problems.append(
                Problem(
                    f"method.reward_functions[{index}]",
                    f"module '{module}' is not in the source folder {code}",
                    spec,
                    True,
                )
            )
    return problems


def content_fingerprint(path: str) -> str:
    """``xxh3-128:<hex>`` of a file's bytes (a folder: its files' names and bytes).

    The dataset's and the base model's are recorded with the run when it is accepted: the train
    program checks the dataset's again before it trains, so a run never trains on data other
    than what it was accepted with, and a download that merges a checkpoint's adapter checks
    the base model's, so the adapter is never merged into weights it was not trained on.
    """
    digest = protocol.content_hasher()
    files = [path] if os.path.isfile(path) else _files_under(path)
    for name in files:
        digest.update(os.path.relpath(name, path).encode() + b"\0")
        with open(name, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return f"{protocol.CONTENT_PREFIX}{digest.hexdigest()}"


def _files_under(folder: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [os.path.join(root, name) for name in sorted(files)]
    return found


def _lora(method: Method, key: str, default: float) -> float | None:
    if not method.given("lora_rank"):
        return None
    return float(_given(method, key, default))


def _given(method: Method, key: str, default: Any) -> Any:
    return getattr(method, key) if method.given(key) else default
