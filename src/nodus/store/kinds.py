"""Artifact kinds: the one place that decides whether a file is weights, state or plain files.

Retention deletes kinds separately (``keep_adapters`` keeps weights, ``keep_recoverable`` keeps
training state), and downloads pick them (``--artifact model|resumable``), so every part of nodus
asks :func:`classify` and nothing else.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Callable

__all__ = ["KINDS", "KIND_FILES", "KIND_STATE", "KIND_WEIGHTS", "classify"]

KIND_WEIGHTS = "weights"
"""Model and adapter weights. Spelled like the continuation mode ``nodus.protocol.MODE_WEIGHTS``
(a warm start takes this kind from its parent), but a different word: a kind of file."""
KIND_STATE = "state"
"""Training state a resume needs besides the weights: optimizer, scheduler, RNG, data position."""
KIND_FILES = "files"
"""Everything else: configs, tokenizers, a directory-contract program's own files."""
KINDS = (KIND_WEIGHTS, KIND_STATE, KIND_FILES)
"""Every artifact kind, in the order reports list them."""

# Basename patterns; matched case-sensitively because the frameworks write exact names.
_WEIGHTS = (
    # model and adapter weights, whole or sharded, with their shard indexes
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model-*-of-*.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",
    "adapter_model.bin",
    "adapter_config.json",
    # what it takes to load them
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.*",
    "merges.txt",
    "spiece.model",
    "chat_template.*",
)
_STATE = (
    "optimizer.pt",
    "optimizer.bin",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "training_args.bin",
    # data position: where the loader stands in the dataset
    "data_position*",
    "data_state*",
    "dataloader_state*",
    "sampler_state*",
)


def classify(relpath: str) -> str:
    """Kind of the file at ``relpath`` (relative, ``/``-separated): by its name alone.

    A directory-contract program's files are ``files`` unless they carry one of the names the
    frameworks use, so a folder the program laid out its own way is kept whole by kind.
    """
    name = posixpath.basename(relpath)
    if _matcher(_WEIGHTS)(name):
        return KIND_WEIGHTS
    if _matcher(_STATE)(name):
        return KIND_STATE
    return KIND_FILES


@functools.cache
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a name matches one of ``patterns``: exact names looked up, the globs compiled
    into one expression, once (one compile per pattern cost a short run milliseconds)."""
    exact = frozenset(pattern for pattern in patterns if not _GLOB.search(pattern))
    globs = [fnmatch.translate(pattern) for pattern in patterns if pattern not in exact]
    combined = re.compile("|".join(globs)).match if globs else None

    def matches(name: str) -> bool:
        return name in exact or (combined is not None and combined(name) is not None)

    return matches


_GLOB = re.compile(r"[*?\[]")
