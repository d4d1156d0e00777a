"""Identities recorded with every checkpoint and checked before a resume.

A resume is only bit-identical when it continues the same training: same program, data,
configuration, model, trainable set, device type and frameworks. Each identity is a short string
(a hash, or the value itself when it is small enough to read), so a refusal can name exactly
what changed and show both sides.

The dataset's identity is its content: a hash of the Arrow data the Trainer reads (the rows as
an Arrow stream, and the indices mapping a ``select`` or ``shuffle`` made), never ``datasets``'
fingerprint alone, which changes with the path and mtime of a local data file and stays the same
for a file edited in place. It costs one pass over the data at memory speed, once per process. The
dataset's format is part of it, a function the format applies (TRL's ``remove_none_values``)
by its module and name, never by a ``repr`` holding its address: the identity is the data's.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import sys
from typing import Any

from nodus import protocol
from nodus.schemas import defaults
from nodus.stages.hf.inprocess.profile import accelerate_precision
from nodus.stages.hf.qualification import current_versions

HF_IDENTITY_IGNORED_ARGS = (
    "output_dir",
    "logging_dir",
    "logging_steps",
    "logging_strategy",
    "logging_first_step",
    "logging_nan_inf_filter",
    "report_to",
    "run_name",
    "disable_tqdm",
    "log_level",
    "log_level_replica",
    "log_on_each_node",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "hub_token",
    "push_to_hub_token",
    "dataloader_pin_memory",
    "include_num_input_tokens_seen",
    "local_rank",
)
"""Training arguments that may differ between attempts: they never change the trained weights.
``local_rank`` differs between the ranks of one world (the world size is an identity of its own,
``processes``)."""

LABELS = {
    "program": "program (source of the main script)",
    "dataset": "train dataset content",
    "training_arguments": "training arguments",
    "data_collator": "data collator (what builds the batches)",
    "model_structure": "model structure (names, shapes, dtypes)",
    "trainable_parameters": "trainable parameters",
    "device_type": "device type",
    "frameworks": "framework versions",
    "precision": "precision (mixed precision, model dtype)",
    "processes": "processes training together (world size)",
    "dataloader_workers": "dataloader workers",
    "adapters": "PEFT adapters",
}

BEFORE_EXTENSIONS = {
    "precision": "float32",
    "processes": "1",
    "dataloader_workers": "0",
    "adapters": "none",
}
"""What an identity recorded before the profile's extensions existed held for each of theirs:
the v1 profile admitted only these."""


def compute(trainer: Any) -> dict[str, str]:
    model = trainer.model
    return {
        "program": _program_hash(),
        **dataset_identity(trainer.train_dataset),
        "training_arguments": _digest(_arguments(trainer.args)),
        "data_collator": collator(trainer.data_collator),
        "model_structure": _structure(model),
        "trainable_parameters": _digest(
            [n for n, p in model.named_parameters() if p.requires_grad]
        ),
        "device_type": trainer.args.device.type,
        "frameworks": ", ".join(f"{k} {v}" for k, v in current_versions().items()),
        "precision": precision(trainer),
        "processes": str(max(1, int(trainer.args.world_size))),
        "dataloader_workers": workers(trainer.args),
        "adapters": adapters(model),
    }


def differences(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """One line per identity that differs, naming it; [] when the resume may go ahead."""
    if not str(saved.get("dataset", "")).startswith(protocol.CONTENT_PREFIX):
        # Saved by a nodus that identified data by fingerprint: compared as it was then.
        now = {**now, "dataset": now.get("dataset_fingerprint", "")}
    saved, now = {**BEFORE_EXTENSIONS, **saved}, {**BEFORE_EXTENSIONS, **now}
    lines = []
    for key, label in LABELS.items():
        if key == "training_arguments" and same_arguments(saved, now):
            continue
        if saved.get(key) != now.get(key):
            source = now.get("dataset_source") if key == "dataset" else None
            lines.append(
                f"{label} differs{f' ({source})' if source else ''}: checkpoint has "
                f"{saved.get(key)!r}, this attempt has {now.get(key)!r}"
            )
    return lines


def precision(trainer: Any) -> str:
    """``float32``, or the autocast and the model's floating dtypes: ``bf16 autocast, model
    float32``."""
    import torch

    args = trainer.args
    launched = accelerate_precision(trainer)
    autocast = [name for name in ("bf16", "fp16") if getattr(args, name, False) or launched == name]
    dtypes = sorted(
        {
            str(v.dtype).removeprefix("torch.")
            for v in trainer.model.state_dict().values()
            if isinstance(v, torch.Tensor) and v.is_floating_point()
        }
    )
    if not autocast and dtypes in ([], ["float32"]):
        return "float32"
    parts = [f"{autocast[0]} autocast"] if autocast else []
    return ", ".join([*parts, f"model {'+'.join(dtypes) or 'float32'}"])


def workers(args: Any) -> str:
    count = int(args.dataloader_num_workers)
    if count == 0:
        return "0"
    return f"{count}, persistent" if args.dataloader_persistent_workers else str(count)


def adapters(model: Any) -> str:
    """``none``, or the PEFT configuration of every adapter (a hash, with the adapter names)."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return "none"
    described = {
        name: _ordered(config.to_dict() if hasattr(config, "to_dict") else str(config))
        for name, config in sorted(configs.items())
    }
    return f"{', '.join(described)} {_digest(described)}"


def _ordered(value: Any) -> Any:
    """Sets as sorted lists: a set of strings prints in another order in every process."""
    if isinstance(value, dict):
        return {str(k): _ordered(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_ordered(v) for v in value), key=str)
    if isinstance(value, (list, tuple)):
        return [_ordered(v) for v in value]
    return value


_CONTENT_BY_FINGERPRINT: dict[str, str] = {}  # within one process a fingerprint means one content


def dataset_identity(data: Any) -> dict[str, str]:
    """``dataset`` (content), and, for reading only, its fingerprint and where it came from."""
    fingerprint = getattr(data, "_fingerprint", None)
    content = _CONTENT_BY_FINGERPRINT.get(fingerprint) if fingerprint else None
    if content is None:
        content = _content(data)
        if fingerprint:
            _CONTENT_BY_FINGERPRINT[fingerprint] = content
    return {
        "dataset": content,
        "dataset_fingerprint": str(fingerprint),
        "dataset_source": _source(data),
    }


def _content(data: Any) -> str:
    """``xxh3-128:<hex> (<rows> rows)`` of the rows in the order the Trainer indexes them."""
    digest = protocol.content_hasher()  # xxhash: a dependency of `datasets`, so present here
    for table in (data.data.table, data._indices.table if data._indices is not None else None):
        _hash_arrow(digest, table)
    for described in (data.features.to_dict(), data.format):
        digest.update(json.dumps(_stable(described), sort_keys=True, default=str).encode())
    return f"{protocol.CONTENT_PREFIX}{digest.hexdigest()} ({len(data):,} rows)"


def _stable(value: Any) -> Any:
    """``value`` as the same text in every process: a function (the ``transform`` of a format
    TRL sets, ``remove_none_values``) by its module and name, a ``partial`` by its function and
    arguments, any other object that is not a plain value by its class, never by a ``repr``
    that holds a memory address (which differs in every process, so a resume was refused for
    unchanged data)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, functools.partial):
        return {
            "partial": _stable(value.func),
            "args": _stable(list(value.args)),
            "keywords": _stable(dict(value.keywords)),
        }
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', None)}.{value.__qualname__}"
    kind = type(value)
    return f"<{kind.__module__}.{kind.__qualname__}>"


def _hash_arrow(digest: Any, table: Any) -> None:
    """Feed ``table`` to ``digest`` as an Arrow IPC stream, buffer by buffer (zero copy).

    The stream holds the column names and types and only the rows a sliced table shows. The
    schema's metadata is left out: ``datasets`` keeps the fingerprint there.
    """
    import pyarrow as pa

    if table is None:
        digest.update(b"no indices")
        return
    table = table.replace_schema_metadata(None)
    sink = _HashingSink(digest)
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), table.schema) as writer:
        writer.write_table(table)


class _HashingSink:
    """A write-only file for pyarrow that hashes what it is given instead of storing it."""

    closed = False

    def __init__(self, digest: Any) -> None:
        self.digest = digest

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return memoryview(data).nbytes

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _source(data: Any) -> str:
    """Where the dataset came from, in words: its builder, split and data files."""
    info = getattr(data, "info", None)
    files = sorted(getattr(info, "download_checksums", None) or {})
    more = f" and {len(files) - 3} more files" if len(files) > 3 else ""
    builder = getattr(info, "builder_name", None)
    parts = [
        f"{builder} dataset" if builder else "dataset",
        f"split {data.split}" if getattr(data, "split", None) else "",
        f"from {', '.join(files[:3])}{more}" if files else "",
    ]
    return ", ".join(part for part in parts if part)


def same_arguments(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """The training arguments of two identities are the same.

    Their digests are, or the values both record are once the arguments that may differ
    (``HF_IDENTITY_IGNORED_ARGS``) are left out: a checkpoint saved by a nodus that ignored
    fewer of them (``local_rank`` differs between the ranks of a world) still matches."""
    if saved.get("training_arguments") == now.get("training_arguments"):
        return True
    before, after = (i.get("training_argument_values") for i in (saved, now))
    if not isinstance(before, dict) or not isinstance(after, dict):
        return False
    kept = [
        {k: v for k, v in value.items() if k not in HF_IDENTITY_IGNORED_ARGS}
        for value in (before, after)
    ]
    return kept[0] == kept[1]


def argument_differences(saved_args: dict[str, Any], args: Any) -> dict[str, tuple[Any, Any]]:
    """The training-argument fields that changed, each with (the checkpoint's value, this
    attempt's), for a refusal that names both."""
    now = json.loads(json.dumps(_arguments(args), default=str))
    saved_args = {k: v for k, v in saved_args.items() if k not in HF_IDENTITY_IGNORED_ARGS}
    names = sorted(set(saved_args) | set(now))
    return {n: (saved_args.get(n), now.get(n)) for n in names if saved_args.get(n) != now.get(n)}


def argument_values(args: Any) -> dict[str, Any]:
    """Stored next to the identities so a refusal can name each changed field."""
    return json.loads(json.dumps(_arguments(args), default=str))


def write(folder: str, identity: dict[str, Any]) -> None:
    with open(os.path.join(folder, defaults.HF_IDENTITY_FILE), "w", encoding="utf-8") as handle:
        json.dump(identity, handle, indent=1, sort_keys=True)


def read(checkpoint: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(checkpoint, defaults.HF_IDENTITY_FILE), encoding="utf-8") as handle:
            return dict(json.load(handle))
    except FileNotFoundError:
        return None


def _program_hash() -> str:
    """Hash of the script that was started (``python train.py``), or of ``-c``/``-m`` text."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and os.path.isfile(path):
        with open(path, "rb") as handle:
            return "sha256:" + hashlib.sha256(handle.read()).hexdigest()[:16]
    return _digest(sys.argv)


def collator(data_collator: Any) -> str:
    """The collator the Trainer batches with, as a readable value.

    A function by its name; the library's collators (``DataCollatorWithPadding``, and the
    collators extension's masking and sequence collators) by their settings (masking rate,
    padding, seed...) and their tokenizer's pad token and side, which decide every batch; a
    model a collator holds (``DataCollatorForSeq2Seq(model=...)``) by its class. Given
    explicitly or picked by the Trainer, the same collator reads the same.
    """
    if dataclasses.is_dataclass(data_collator) and hasattr(data_collator, "tokenizer"):
        settings = {
            field.name: _setting(getattr(data_collator, field.name))
            for field in dataclasses.fields(data_collator)
            if field.name != "tokenizer"
        }
        tokenizer = data_collator.tokenizer
        settings["pad_token_id"] = getattr(tokenizer, "pad_token_id", None)
        settings["padding_side"] = getattr(tokenizer, "padding_side", None)
        shown = ", ".join(f"{name}={value!r}" for name, value in settings.items())
        return f"{type(data_collator).__name__}({shown})"
    name = getattr(data_collator, "__qualname__", None) or type(data_collator).__qualname__
    return f"{data_collator.__module__}.{name}"


class _Shown(str):
    """A value shown as it is (``repr`` of it prints the text without quotes)."""

    def __repr__(self) -> str:
        return str(self)


def _setting(value: Any) -> Any:
    """A collator's setting as its identity shows it: a model (or any object that is not a
    plain value) by its class, never its ``repr`` (the whole module tree, or a memory
    address)."""
    if value is None or isinstance(value, (bool, int, float, str, enum.Enum)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str)) for v in value):
        return value
    kind = type(value)
    return _Shown(f"<{kind.__module__}.{kind.__qualname__}>")


def weights_digest(model: Any) -> str:
    """A hash of every tensor of the model's state, by name: the same weights, the same text."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return "sha256:" + digest.hexdigest()[:16]


def _structure(model: Any) -> str:
    state = model.state_dict()
    values = sum(v.numel() for v in state.values())
    shapes = _digest([[k, list(v.shape), str(v.dtype)] for k, v in state.items()])
    return f"{len(state)} tensors, {values:,} values, {shapes}"


def _arguments(args: Any) -> dict[str, Any]:
    values = args.to_dict()
    for name in HF_IDENTITY_IGNORED_ARGS:
        values.pop(name, None)
    return values


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
