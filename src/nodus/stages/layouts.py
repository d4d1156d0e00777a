"""Checkpoint layouts nodus knows, and when a folder of each is complete.

A program outside an integration may write ``checkpoint-<step>`` in place, and a folder that
stops changing for a while is not necessarily whole: the Transformers Trainer writes the
weights, then gathers the optimizer state (minutes for a big model), then writes the rest.
Each layout below is recognised by the names of its files and is complete once the file its
writer writes last is there:

- a Transformers Trainer checkpoint, told by files only the Trainer writes
  (``trainer_state.json``, ``training_args.bin``, ``rng_state*.pth``; an ``optimizer.pt`` is
  anybody's): ``trainer_state.json``;
- an Accelerate ``save_state`` folder (``optimizer*.bin``, ``scheduler*.bin``, ``sampler*.bin``,
  ``random_states_*.pkl``): ``random_states_<rank>.pkl``, then one ``custom_checkpoint_<i>.pkl``
  per object registered for checkpointing, numbered from 0 without a gap, as many as the
  run's earlier folders held (Accelerate writes them after the RNG states);
- a torch distributed checkpoint (``*.distcp`` in any folder of the checkpoint): the
  ``.metadata`` next to them.

What both the Trainer and Accelerate write first (model weights, FSDP's sharded
``pytorch_model_fsdp_<n>/`` and ``optimizer_<n>/`` folders, or only the model's
``config.json`` so far) is a checkpoint still being written. A model saved with
``save_pretrained`` alone (weights *and* their ``config.json``/``adapter_config.json``, the
index of sharded weights included) is whole once settled: a custom loop saving its model each
epoch is protected as before, and the Trainer's own folder is told apart by the
``training_args.bin`` it writes right after the weights, before the optimizer gather.
The orders are those of
Transformers 4.57 (``Trainer._save_checkpoint``), Accelerate 1.12 (``save_accelerator_state``:
weights, optimizers, schedulers, samplers, scaler, RNG states; objects registered for
checkpointing follow, quickly) and torch's ``FileSystemWriter`` (the coordinator renames
``.metadata`` into place after every rank wrote its data); tests/runner/test_runner_directory.py
watches the installed libraries save to keep them honest.

A Trainer checkpoint saved by a world of several processes holds every rank's RNG state
(``rng_state_<rank>.pth``); the world size is not in the file names, so :func:`ranks` checks a
folder against the size its writer recorded (the hf-trainer integration's identity record,
``processes``), and a folder lacking a rank's part is not whole.

A program with a layout of its own names its last-written file with ``[continuity]
checkpoint_complete``; that file alone then decides, and the known layouts are not consulted
(a custom folder may well hold a ``model.safetensors``). Any other folder is whole once settled,
unless it is empty or holds a temporary file a writer has yet to rename into place
(:func:`nodus.stages.formats.temporary`); the files' bytes are checked separately
(:mod:`nodus.stages.formats`).

Every function here is pure over the folder's file list (relative ``/``-separated paths).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from nodus.stages.formats import temporary

__all__ = [
    "ACCELERATE_LAYOUT",
    "Verdict",
    "accelerate_folder",
    "custom_objects",
    "distributed",
    "judge",
    "ranks",
]


@dataclass(frozen=True)
class Verdict:
    """What nodus makes of a checkpoint folder's file list."""

    layout: str | None = None  # the layout recognised; None: none, complete once settled
    missing: str | None = None  # what it still lacks, in words; None once complete
    last: tuple[str, ...] = ()  # the files that completed it (written last)

    @property
    def complete(self) -> bool:
        return self.missing is None


# Names as the libraries write them (case-sensitive). Weights are written first by both the
# Trainer and Accelerate, so on their own they say "a checkpoint is being written", not which.
_WEIGHTS = re.compile(
    r"(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?"
)
_SHARD = re.compile(r"-\d+-of-\d+\.")
_FSDP_FOLDER = re.compile(r"pytorch_model_fsdp_\d+|optimizer_\d+")
_CONFIGS = frozenset({"config.json", "generation_config.json", "adapter_config.json"})
# Only the Trainer writes these; optimizer.pt and scheduler.pt are any program's names.
_TRAINER = re.compile(r"rng_state(_\d+)?\.pth|training_args\.bin|trainer_state\.json")
_TRAINER_LAST = "trainer_state.json"
_ACCELERATE = re.compile(
    r"(optimizer|scheduler|sampler|dl_state_dict)(_\d+)?\.bin|random_states_\d+\.pkl"
    r"|custom_checkpoint_\d+\.pkl|(model|pytorch_model)_\d+\.(safetensors|bin)"
)
ACCELERATE_LAYOUT = "an Accelerate save_state folder"
"""The name of Accelerate's layout in a :class:`Verdict` (its registered objects are counted)."""
_ACCELERATE_LAST = re.compile(r"random_states_\d+\.pkl")
_ACCELERATE_CUSTOM = re.compile(r"custom_checkpoint_(\d+)\.pkl")
_DCP_DATA = re.compile(r".*\.distcp")
# The coordinator's global file, or each rank's own when ranks do not coordinate.
_DCP_METADATA = re.compile(r"(__\d+)?\.metadata")


def judge(files: Iterable[str], marker: str | None = None, custom: int = 0) -> Verdict:
    """The verdict on a folder holding ``files``; ``marker`` is ``checkpoint_complete``;
    ``custom``: how many registered objects the run's earlier Accelerate folders held."""
    files = list(files)
    if not files:
        return Verdict(None, "any file: the folder is empty (created, not yet written)")
    pending = sorted(name for name in files if temporary(name))
    if pending:
        return Verdict(None, f"{pending[0]} to be renamed into place (a write is under way)")
    if marker is not None:
        return _marker(files, marker)
    verdicts = [v for v in (_top_level(files, custom), distributed(files)) if v is not None]
    if not verdicts:
        return Verdict()
    layout = " with ".join(v.layout for v in verdicts if v.layout)
    missing = next((v.missing for v in verdicts if not v.complete), None)
    last = tuple(name for v in verdicts for name in v.last)
    return Verdict(layout, missing, last)


def _marker(files: list[str], marker: str) -> Verdict:
    layout = f"checkpoint_complete = {marker!r}"
    if marker in files:
        return Verdict(layout, None, (marker,))
    return Verdict(layout, f"{marker} (checkpoint_complete: the program writes it last)")


def custom_objects(files: Iterable[str]) -> int:
    """How many objects registered for checkpointing an Accelerate folder holds."""
    return sum(1 for name in files if "/" not in name and _ACCELERATE_CUSTOM.fullmatch(name))


def accelerate_folder(files: Iterable[str]) -> bool:
    """Whether ``files`` are an Accelerate folder with its RNG states (its registered objects'
    count is then the program's, once the folder is whole)."""
    return _any(_ACCELERATE_LAST, (name for name in files if "/" not in name))


def _top_level(files: list[str], custom: int) -> Verdict | None:
    """A Trainer or Accelerate folder: both write their files at the top of the folder."""
    top = [name for name in files if "/" not in name]
    folders = {name.split("/", 1)[0] for name in files if "/" in name}
    if _any(_ACCELERATE, top):
        return _accelerate(top, custom)
    if _any(_TRAINER, top):
        if _TRAINER_LAST in top:
            return Verdict("a Transformers Trainer checkpoint", None, (_TRAINER_LAST,))
        missing = f"{_TRAINER_LAST} (the Trainer writes it last)"
        return Verdict("a Transformers Trainer checkpoint", missing)
    if _saved_model(top, folders):
        return None
    configs_only = not folders and set(top) <= _CONFIGS
    if _any(_WEIGHTS, top) or _any(_FSDP_FOLDER, folders) or (top and configs_only):
        missing = (
            f"the rest of the checkpoint: {_TRAINER_LAST} (Trainer) or "
            "random_states_<rank>.pkl (Accelerate) follows the weights"
        )
        return Verdict("a model being saved, the first part of a checkpoint", missing)
    return None


def _accelerate(top: list[str], custom: int) -> Verdict:
    """Weights, optimizers, schedulers, samplers, RNG states, then the registered objects."""
    layout = ACCELERATE_LAYOUT
    last = tuple(name for name in top if _ACCELERATE_LAST.fullmatch(name))
    if not last:
        return Verdict(layout, "random_states_<rank>.pkl (Accelerate writes it after the model)")
    numbers = sorted(
        int(found.group(1)) for found in map(_ACCELERATE_CUSTOM.fullmatch, top) if found
    )
    expected = max(custom, len(numbers))
    gap = next((i for i in range(expected) if i not in numbers), None)
    if gap is not None:
        held = f"the run's earlier saves held {custom}" if custom > len(numbers) else "a gap"
        missing = f"custom_checkpoint_{gap}.pkl (objects registered for checkpointing: {held})"
        return Verdict(layout, missing, last)
    customs = tuple(f"custom_checkpoint_{i}.pkl" for i in numbers)
    return Verdict(layout, None, last + customs)


def _saved_model(top: list[str], folders: set[str]) -> bool:
    """``save_pretrained`` output: weights with their config, shards with their index."""
    weights = [name for name in top if _WEIGHTS.fullmatch(name)]
    if (
        not weights
        or _any(_FSDP_FOLDER, folders)
        or not (_CONFIGS - {"generation_config.json"}) & set(top)
    ):
        return False
    sharded = any(_SHARD.search(name) for name in weights)
    return not sharded or any(name.endswith(".index.json") for name in weights)


def distributed(files: list[str]) -> Verdict | None:
    """torch distributed checkpoints: every folder with ``.distcp`` data needs its metadata."""
    folders = sorted({posixpath.dirname(name) for name in files if _DCP_DATA.fullmatch(name)})
    if not folders:
        return None
    last, lacking = [], []
    for folder in folders:
        found = [
            name
            for name in files
            if posixpath.dirname(name) == folder
            and _DCP_METADATA.fullmatch(posixpath.basename(name))
        ]
        last.extend(found)
        if not found:
            lacking.append(posixpath.join(folder, ".metadata"))
    missing = f"{', '.join(lacking)} (written last)" if lacking else None
    return Verdict("a torch distributed checkpoint", missing, tuple(last))


def ranks(files: Iterable[str], world: int) -> Verdict | None:
    """A Trainer checkpoint of a world of ``world`` processes: every rank's ``rng_state_<r>.pth``
    (None for a world of one, or when it holds every rank's)."""
    if world <= 1:
        return None
    top = {name for name in files if "/" not in name}
    lacking = [f"rng_state_{r}.pth" for r in range(world) if f"rng_state_{r}.pth" not in top]
    if not lacking:
        return None
    missing = (
        f"{', '.join(lacking)} (every rank's RNG state: the checkpoint's identity records a "
        f"world of {world} processes)"
    )
    return Verdict("a Transformers Trainer checkpoint of several processes", missing)


def _any(pattern: re.Pattern[str], names: Iterable[str]) -> bool:
    return any(pattern.fullmatch(name) for name in names)
