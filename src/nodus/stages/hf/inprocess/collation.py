"""A collator that draws random numbers resumes exactly: each pending batch is rebuilt as it was.

The library's masking collators (``DataCollatorForLanguageModeling``,
``DataCollatorForWholeWordMask``) draw their masks from the process's random generators (Python,
NumPy, torch) or from a generator of their own (``seed=``), in the main process when the loader
has no workers. Two things make the Trainer's own resume from a checkpoint inside an epoch
inexact for them (measured: the final weights differ):

- Accelerate's ``DataLoaderShard`` collates one batch ahead. At a save after step ``u`` the
  batch step ``u + 1`` trains first is already collated, under the random state of *before*
  step ``u``'s forward pass (its dropout), which the checkpoint's ``rng_state.pth`` (the state
  *after* it) cannot reproduce.
- On resume the Trainer collates the first update's batches (and the one after them) before it
  loads the checkpoint's random state (``rng_to_sync`` after ``get_batch_samples``), from
  whatever state the fresh process is in.

So the hook wraps the train loader's collator (:class:`RecordingCollator`; the program's
``trainer.data_collator`` stays its own): it records the random state before every collation and
forgets those whose batches were handed to training. A save stores the states of the collated
but untrained batches, and the collator's own generator, in the checkpoint
(:data:`~nodus.schemas.HF_COLLATION_FILE`). A resume inside an epoch collates those
pending batches again under their recorded states, then loads the checkpoint's random state
(where the uninterrupted run collated the next batch), and the Trainer's own later load of it is
skipped: every batch and every dropout mask after the resume is the uninterrupted run's.

CUDA generators are not recorded: the library's collators build their batches on the CPU.
"""

from __future__ import annotations

import copy
import os
import random
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

HF_COLLATION_FILE = "nodus-collation.pth"
"""Written into an integration checkpoint of a Trainer whose collator draws random numbers: the
random states its collated but not yet trained batches were built under
(:mod:`nodus.stages.hf.inprocess.collation`)."""


def rng_state(collate: Any) -> dict[str, Any]:
    """The random state a collation starts from: the process's and the collator's own."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if hasattr(collate, "generator"):
        state["collator"] = generator_state(collate.generator)
    return state


def set_rng_state(collate: Any, state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["cpu"])
    if "collator" in state:
        set_generator(collate, state["collator"])


def generator_state(generator: Any) -> Any:
    """A collator's own generator (``seed=``): a torch ``Generator`` (``return_tensors="pt"``)
    or a NumPy one (``"np"``); None while the collator has not created it yet."""
    if generator is None:
        return None
    if isinstance(generator, torch.Generator):
        return ("torch", generator.get_state())
    if isinstance(generator, np.random.Generator):
        return ("numpy", copy.deepcopy(generator.bit_generator.state))
    raise TypeError(f"a collator generator of type {type(generator).__name__}")


def set_generator(collate: Any, state: Any) -> None:
    """The collator's own generator at ``state`` (of :func:`generator_state`)."""
    if state is None:
        collate.generator = None
        return
    kind, value = state
    generator = getattr(collate, "generator", None)
    if kind == "torch":
        if not isinstance(generator, torch.Generator):
            generator = collate.generator = torch.Generator()
        generator.set_state(value)
    else:
        if not isinstance(generator, np.random.Generator):
            generator = collate.generator = np.random.default_rng()
        generator.bit_generator.state = copy.deepcopy(value)


class RecordingCollator:
    """The train loader's collator, recording the random state before every collation."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate
        self.pending: deque[dict[str, Any]] = deque()  # collated, not yet handed to training
        self._replay: deque[dict[str, Any]] = deque()
        self._then: Callable[[], None] | None = None

    def __call__(self, features: Any) -> Any:
        replaying = bool(self._replay)
        if replaying:
            set_rng_state(self.collate, self._replay.popleft())
        self.pending.append(rng_state(self.collate))
        batch = self.collate(features)
        if replaying and not self._replay and self._then is not None:
            then, self._then = self._then, None
            then()
        return batch

    def trained(self, count: int) -> None:
        """``count`` batches went to training: the oldest pending ones."""
        for _ in range(min(count, len(self.pending))):
            self.pending.popleft()

    def saved(self) -> dict[str, Any]:
        """What a checkpoint of this instant holds: pending batches' states, the generator."""
        saved: dict[str, Any] = {"pending": list(self.pending)}
        if hasattr(self.collate, "generator"):
            saved["generator"] = generator_state(self.collate.generator)
        return saved

    def restore(self, saved: dict[str, Any], load_checkpoint_rng: Callable[[], None]) -> None:
        """Resume from a checkpoint that held ``saved``.

        Without pending batches (a save at an epoch end) only the collator's generator is set:
        the Trainer loads the checkpoint's random state before its next collation itself. With
        them, the next collations replay them, and ``load_checkpoint_rng`` runs after the last.
        """
        if "generator" in saved:
            set_generator(self.collate, saved["generator"])
        if saved.get("pending"):
            self._replay = deque(saved["pending"])
            self._then = load_checkpoint_rng


def for_ranks(saved: list[dict[str, Any]]) -> dict[str, Any]:
    """What the file holds: one process's record, or in a world of several processes each
    rank's (every rank collates its own shard of the batches with its own random state)."""
    return saved[0] if len(saved) == 1 else {"ranks": saved}


def write(folder: str, saved: dict[str, Any]) -> None:
    torch.save(saved, os.path.join(folder, HF_COLLATION_FILE))


def read(checkpoint: str, rank: int = 0) -> dict[str, Any] | None:
    """The record of process ``rank`` in the checkpoint, or None when it holds none."""
    path = os.path.join(checkpoint, HF_COLLATION_FILE)
    if not os.path.isfile(path):
        return None
    saved = torch.load(path, weights_only=False)
    if "ranks" in saved:
        ranks = saved["ranks"]
        return ranks[rank] if rank < len(ranks) else None
    return saved
