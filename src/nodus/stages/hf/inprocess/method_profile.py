"""The method profile: what nodus's own managed-method program may train (docs/methods.md).

The train stage of a framework shortcut (``python -m nodus.stages.methods.train``) builds one of
TRL's trainers, with TRL's collators and, with ``lora_rank``, a PEFT model: all outside the v1
profile for users' programs (:mod:`profile`), which stays as it is. This profile allows exactly
those, and keeps every v1 rule that is about the run rather than the program (one process and
device, float32 tensors, a fingerprinted map-style dataset, no workers, the seedable sampler,
the Trainer's own optimizer, no argument that breaks a resume). It applies only to nodus's own
program: any other ``__main__`` is refused, so no user program escapes the v1 profile through it.
"""

from __future__ import annotations

import sys
from typing import Any

from nodus import protocol
from nodus.schemas.method_specs import METHODS
from nodus.stages.hf.inprocess import profile

TRAINERS = tuple(spec.trainer for spec in METHODS.values())
"""TRL's trainer classes (module ``trl``), exactly, no subclass: those a managed method trains."""

_LIBRARIES = ("transformers.", "trl.", "nodus.")
"""Where the callbacks and collators this profile allows come from."""


def check(trainer: Any, given: dict[str, Any]) -> list[str]:
    return profile.check(trainer, given, RULES)


def _nodus_program(trainer: Any, given: dict[str, Any]) -> list[str]:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) != protocol.METHOD_TRAIN_PROGRAM:
        return [
            f"the method profile is for nodus's own program ({protocol.METHOD_TRAIN_PROGRAM}); "
            "a program of your own runs under the v1 profile"
        ]
    return []


def _trl_trainer(trainer: Any, given: dict[str, Any]) -> list[str]:
    kind = type(trainer)
    if kind.__name__ in TRAINERS and kind.__module__.split(".")[0] == "trl":
        return []
    return [
        f"{kind.__module__}.{kind.__qualname__}; the method profile needs one of TRL's trainers"
    ]


def _library_parts(trainer: Any, given: dict[str, Any]) -> list[str]:
    """TRL's and Transformers' collators and callbacks, nothing of a program's own."""
    reasons = []
    collator = trainer.data_collator
    if collator is not None and not _from_library(collator):
        reasons.append(f"custom data collator ({type(collator).__qualname__})")
    custom = [
        type(cb).__qualname__ for cb in trainer.callback_handler.callbacks if not _from_library(cb)
    ]
    if custom:
        reasons.append(f"custom callbacks ({', '.join(custom)})")
    return reasons


def _from_library(thing: Any) -> bool:
    module = getattr(thing, "__module__", None) or type(thing).__module__
    return f"{module}.".startswith(_LIBRARIES)


def _loading(trainer: Any, given: dict[str, Any]) -> list[str]:
    args = trainer.args
    reasons = []
    if args.dataloader_num_workers != 0:
        reasons.append(f"dataloader_num_workers={args.dataloader_num_workers}; it needs 0")
    if not args.accelerator_config.use_seedable_sampler:
        reasons.append("accelerator_config.use_seedable_sampler=False")
    return reasons


RULES = (
    _nodus_program,
    _trl_trainer,
    profile._one_process_one_device,
    profile._full_precision,
    profile._model_state,
    profile._dataset,
    _loading,
    _library_parts,
    profile._optimizer,
    profile._arguments,
)
