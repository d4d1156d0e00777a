"""Identities recorded with every checkpoint and checked before a resume.

A resume is only bit-identical when it continues the same training: same program, data,
configuration, model, trainable set, device type and frameworks. Each identity is a short string
(a hash, or the value itself when it is small enough to read), so a refusal can name exactly
what changed and show both sides.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from typing import Any

from nodus.schemas import defaults
from nodus.stages.hf.qualification import current_versions

LABELS = {
    "program": "program (source of the main script)",
    "dataset": "dataset fingerprint",
    "training_arguments": "training arguments",
    "data_collator": "data collator (what builds the batches)",
    "model_structure": "model structure (names, shapes, dtypes)",
    "trainable_parameters": "trainable parameters",
    "device_type": "device type",
    "frameworks": "framework versions",
}


def compute(trainer: Any) -> dict[str, str]:
    model = trainer.model
    return {
        "program": _program_hash(),
        "dataset": str(getattr(trainer.train_dataset, "_fingerprint", None)),
        "training_arguments": _digest(_arguments(trainer.args)),
        "data_collator": collator(trainer.data_collator),
        "model_structure": _structure(model),
        "trainable_parameters": _digest(
            [n for n, p in model.named_parameters() if p.requires_grad]
        ),
        "device_type": trainer.args.device.type,
        "frameworks": ", ".join(f"{k} {v}" for k, v in current_versions().items()),
    }


def differences(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """One line per identity that differs, naming it; [] when the resume may go ahead."""
    lines = []
    for key, label in LABELS.items():
        if saved.get(key) != now.get(key):
            lines.append(
                f"{label} differs: checkpoint has {saved.get(key)!r}, "
                f"this attempt has {now.get(key)!r}"
            )
    return lines


def argument_differences(saved_args: dict[str, Any], args: Any) -> list[str]:
    """The training-argument fields that changed, for a readable refusal."""
    now = json.loads(json.dumps(_arguments(args), default=str))
    names = sorted(set(saved_args) | set(now))
    return [n for n in names if saved_args.get(n) != now.get(n)]


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

    A function by its name; ``DataCollatorWithPadding`` by its settings and its tokenizer's pad
    token and side, which decide every padded batch. Given explicitly or picked by the Trainer,
    the same collator reads the same.
    """
    if dataclasses.is_dataclass(data_collator) and hasattr(data_collator, "tokenizer"):
        settings = {
            field.name: getattr(data_collator, field.name)
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


def _structure(model: Any) -> str:
    state = model.state_dict()
    values = sum(v.numel() for v in state.values())
    shapes = _digest([[k, list(v.shape), str(v.dtype)] for k, v in state.items()])
    return f"{len(state)} tensors, {values:,} values, {shapes}"


def _arguments(args: Any) -> dict[str, Any]:
    values = args.to_dict()
    for name in defaults.HF_IDENTITY_IGNORED_ARGS:
        values.pop(name, None)
    return values


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
