"""The extensions of the hf-trainer-v1 profile: what each is, and how it is qualified.

The v1 profile (docs/hf-trainer.md) is one process, one device, float32, no dataloader workers, the
library's default collators and a plain model. Each extension widens it by one thing real
training needs, and each is trusted only where it is qualified: on a version set the project's
own tests prove it on (shipped in ``qualified.json``) or where ``nodus qualify --extension NAME``
passed. An extension is qualified per device type (``cpu``, ``cuda``): bf16 autocast or a
process group on the CPU says nothing about the same on a GPU.

This module is the one definition both sides share: the in-process profile names the extensions
a Trainer uses (:mod:`nodus.stages.hf.inprocess.profile`), the qualification records name them
(:mod:`nodus.stages.hf.qualification`), ``nodus qualify`` runs their cases
(:mod:`nodus.qualify`). It imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIXED_PRECISION = "mixed-precision"
PROCESSES = "processes"
WORKERS = "dataloader-workers"
COLLATORS = "collators"
PEFT = "peft"
TRL = "trl"


@dataclass(frozen=True)
class Extension:
    name: str
    summary: str
    """What it admits, for ``nodus qualify --help`` and refusals."""
    case_env: dict[str, str] = field(default_factory=dict)
    """The qualification program's settings that exercise it (``qualify_extensions.py``)."""
    processes: int = 1
    """How many processes the qualification case launches (``torchrun --nproc_per_node``)."""
    more_cases: tuple[dict[str, str], ...] = ()
    """More cases, each with these settings instead of ``case_env``, that must pass too: the
    other things the extension admits (TRL's DPOTrainer besides its SFTTrainer)."""
    accelerator_cases: tuple[dict[str, str], ...] = ()
    """More cases, each with these settings instead of ``case_env``, that must pass too where
    the device is an accelerator (``cuda``): what the extension admits only there."""


EXTENSIONS: dict[str, Extension] = {
    e.name: e
    for e in (
        Extension(
            MIXED_PRECISION,
            "bf16=True autocast (fp16=True too on cuda), and models stored in bfloat16",
            {"QUALIFY_PRECISION": "bf16"},
            # fp16 trains with a GradScaler on an accelerator only (refused on the CPU)
            accelerator_cases=({"QUALIFY_PRECISION": "fp16"},),
        ),
        Extension(
            PROCESSES,
            "several processes on one machine (torchrun, accelerate launch: DDP)",
            # 6 steps per epoch in a world of two: the kill steps fall inside epochs 0 and 4
            # and on the boundary between epochs 1 and 2.
            {"QUICKSTART_EPOCHS": "6"},
            processes=2,
        ),
        Extension(
            WORKERS,
            "dataloader_num_workers > 0, with or without persistent workers",
            # persistent: the workers' base seed is drawn once, so a resume must not draw it
            # again (the harder case; the tests prove non-persistent workers too)
            {"QUALIFY_WORKERS": "2", "QUALIFY_PERSISTENT": "1"},
        ),
        Extension(
            COLLATORS,
            "DataCollatorForLanguageModeling, DataCollatorForWholeWordMask, "
            "DataCollatorForSeq2Seq, DataCollatorForTokenClassification",
            {"QUALIFY_COLLATOR": "mlm"},
        ),
        Extension(
            PEFT,
            "a PEFT model (LoRA adapters) under the plain Trainer",
            {"QUALIFY_PEFT": "1"},
        ),
        Extension(
            TRL,
            "TRL's SFTTrainer and DPOTrainer with TRL's own collators (`trl sft`, `trl dpo` "
            "unchanged)",
            {"QUALIFY_TRL": "sft"},
            more_cases=({"QUALIFY_TRL": "dpo"},),
        ),
    )
}


def key(name: str, device: str) -> str:
    """How a qualification record names an extension qualified on one device type."""
    return f"{name}@{device}"


def qualify_command(names: list[str] | tuple[str, ...]) -> str:
    return "nodus qualify " + " ".join(f"--extension {name}" for name in names)
