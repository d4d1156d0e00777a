"""What the generated stages read: the resolved ``[method]`` settings, and the dataset."""

from __future__ import annotations

import json
import os
from typing import Any

from nodus import protocol
from nodus.schemas.methods import content_fingerprint


def read() -> dict[str, Any]:
    """The settings ``nodus.schemas.methods`` resolved (every key explicit)."""
    text = os.environ.get(protocol.ENV_METHOD)
    if not text:
        raise SystemExit(f"nodus: {protocol.ENV_METHOD} is not set; this program runs as a stage")
    return dict(json.loads(text))


def unchanged_dataset_problem(settings: dict[str, Any]) -> str | None:
    """A run trains on the data it was accepted with, or not at all."""
    now = content_fingerprint(settings["dataset"])
    if now != settings["dataset_fingerprint"]:
        return (
            f"the dataset {settings['dataset']} changed since the run was accepted: it was "
            f"{settings['dataset_fingerprint']}, it is {now}"
        )
    return None


def load_dataset(path: str) -> Any:
    """A local JSONL or Parquet file, or a saved dataset folder, as a map-style Dataset."""
    import datasets

    if os.path.isdir(path):
        loaded = datasets.load_from_disk(path)
        return loaded["train"] if isinstance(loaded, datasets.DatasetDict) else loaded
    kind = "parquet" if path.endswith((".parquet", ".pq")) else "json"
    return datasets.load_dataset(kind, data_files=path, split="train")
