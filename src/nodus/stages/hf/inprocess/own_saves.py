"""The Trainer's own checkpoints, beside nodus's: duplicate work, named once.

A prepared Trainer is saved by nodus (``session``); one whose arguments still ask it to save
(``save_strategy`` other than ``"no"``: the library's default is every 500 steps) also writes
``checkpoint-<step>`` folders of its own under ``output_dir``, for the whole run. nodus never
captures those (its snapshots are the ones it wrote), so each costs a save's time and disk for
nothing. At the Trainer's first own save the integration says so once, in a line and a
``duplicate_saves`` event: the setting to turn off, and what the save cost, measured as the bytes
it wrote (the model's parameter bytes where its folder is not found).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from nodus import protocol
from nodus._atomic import tree_bytes
from nodus.schemas.units import human_bytes
from nodus.stages.hf.inprocess.channel import ControlDir

__all__ = ["OwnSaves", "callback", "of_arguments", "own_saves", "sentence"]


@dataclass(frozen=True)
class OwnSaves:
    """How the Trainer saves by itself: its ``save_strategy`` and, by steps, ``save_steps``."""

    strategy: str
    steps: float | None

    @property
    def setting(self) -> str:
        """Where the Trainer is asked to save, as its arguments say it."""
        if self.strategy == "steps":
            return f'save_strategy="steps", save_steps={_number(self.steps)}'
        return f'save_strategy="{self.strategy}"'


def own_saves(strategy: str, steps: float | None) -> OwnSaves | None:
    """The Trainer's own saving from its ``save_strategy`` and ``save_steps``; ``None`` when
    it saves nothing by itself (``"no"``)."""
    if strategy == "no":
        return None
    return OwnSaves(strategy, steps if strategy == "steps" else None)


def of_arguments(args: Any) -> OwnSaves | None:
    """:func:`own_saves` of a ``TrainingArguments`` (its strategy is an enum of strings)."""
    strategy = args.save_strategy
    return own_saves(str(getattr(strategy, "value", strategy)), getattr(args, "save_steps", None))


def sentence(found: OwnSaves, size: int, measured: bool, folder: str) -> str:
    """The one line: what the Trainer does besides nodus, what it costs, what to turn off."""
    cost = (
        f"its save wrote {human_bytes(size)} to {folder}"
        if measured
        else f"each writes about {human_bytes(size)} (the model's parameters) or more"
    )
    return (
        f"nodus: the Trainer also saves checkpoints of its own ({found.setting}), which nodus "
        f"never captures: duplicate work at every one of its saves for the whole run ({cost}); "
        f'nodus saves this run: set save_strategy="no" (--save_strategy no) to stop it'
    )


def callback(channel: ControlDir, found: OwnSaves) -> Any:
    """A ``TrainerCallback`` that names the duplicate saves at the first of them (rank 0)."""
    from transformers import TrainerCallback

    class NodusOwnSavesCallback(TrainerCallback):
        def __init__(self) -> None:
            self.said = False

        def on_save(self, args, state, control, **kwargs):
            if self.said or not state.is_world_process_zero:
                return
            self.said = True
            folder = os.path.join(args.output_dir, protocol.checkpoint_folder(state.global_step))
            size = tree_bytes(folder)
            measured = size > 0
            if not measured:
                size = _parameter_bytes(kwargs.get("model"))
            details = {
                "setting": found.setting,
                "turn_off": 'save_strategy="no"',
                "flag": "--save_strategy no",
                "step": state.global_step,
                "bytes": size,
                "measured": measured,
                "folder": folder,
            }
            channel.write_event(protocol.EVENT_DUPLICATE_SAVES, details)
            print(sentence(found, size, measured, folder), file=sys.stderr, flush=True)

    NodusOwnSavesCallback.__module__ = __name__
    return NodusOwnSavesCallback()


def _parameter_bytes(model: Any) -> int:
    if model is None:
        return 0
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _number(value: float | None) -> str:
    if value is None:
        return "?"
    return str(int(value)) if float(value).is_integer() else str(value)
