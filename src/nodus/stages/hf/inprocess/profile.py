"""The hf-trainer-v1 profile (docs/hf-trainer.md, "The profile"), checked when the Trainer is built.

``assess(trainer, given)`` returns every reason the program is outside the profile, phrased for
a person, so explicit ``hf-trainer-v1`` can refuse with the full list and ``auto`` can record it,
and the extensions of the profile it uses (:mod:`nodus.stages.hf.extensions`), each with what in
the program uses it: those are admitted where they are qualified. ``given`` are the arguments the
program passed to ``Trainer(...)``: some rules ("the default data collator", "the Trainer creates
optimizer and scheduler") are about what the user supplied, not about what the Trainer ended up
with.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodus import protocol
from nodus.schemas.method_specs import trainer_methods
from nodus.stages.hf import extensions
from nodus.stages.hf.inprocess.channel import ControlDir

HF_MAX_MODEL_STATE_BYTES = 4_000_000_000
"""Largest complete model state the v1 profile accepts (docs/hf-trainer.md, "The profile")."""


@dataclass(frozen=True)
class Uses:
    """A finding that is no refusal: the program uses an extension of the profile."""

    extension: str
    what: str


Finding = str | Uses
Rule = Callable[[Any, dict[str, Any]], Sequence[Finding]]


@dataclass
class Assessment:
    reasons: list[str] = field(default_factory=list)
    """Why the program is outside the profile and its extensions; [] when it is inside."""
    extensions: dict[str, str] = field(default_factory=dict)
    """The extensions it uses: name -> what uses it ("bf16=True")."""


def assess(
    trainer: Any, given: dict[str, Any], rules: tuple[Rule, ...] | None = None
) -> Assessment:
    found = Assessment()
    for rule in RULES if rules is None else rules:
        for finding in rule(trainer, given):
            if isinstance(finding, Uses):
                previous = found.extensions.get(finding.extension)
                found.extensions[finding.extension] = (
                    f"{previous}, {finding.what}" if previous else finding.what
                )
            else:
                found.reasons.append(finding)
    return found


def check(trainer: Any, given: dict[str, Any], rules: tuple[Rule, ...] | None = None) -> list[str]:
    """Every reason the program is outside the profile, its extensions counted as outside (the
    managed methods' profile admits none of them)."""
    found = assess(trainer, given, rules)
    return found.reasons + [
        f"{what}: outside this profile (the hf-trainer-v1 extension {name!r} is not for it)"
        for name, what in found.extensions.items()
    ]


def _one_process_one_device(trainer, given) -> list[Finding]:
    args = trainer.args
    reasons: list[Finding] = []
    world = _world_size(args)
    if world > 1:
        reasons.append(Uses(extensions.PROCESSES, f"distributed training (world_size={world})"))
        node = _node()
        local = int(os.environ.get("LOCAL_WORLD_SIZE") or (1 if _spread(node) else world))
        reasons += across_machines(world, local, args.process_index, node)
    if args.n_gpu > 1:
        reasons.append(f"{args.n_gpu} devices in one process (DataParallel); v1 needs one device")
    if args.deepspeed or args.fsdp:
        reasons.append("DeepSpeed or FSDP is configured; v1 needs one process and one device")
    return reasons


def across_machines(
    world: int, local: int, rank: int, node: protocol.NodePlace | None
) -> list[str]:
    """Why a world of ``world`` processes, ``local`` of them on this machine, is refused: [] for
    a world on one machine, and for a world over machines only on the nodes of a multi-node
    stage (``node``, as the runner told it) with one process per node, the process of global
    rank ``rank`` on node ``rank``. There node 0's attempt is the one that captures, and it
    holds rank 0, which writes every checkpoint (with every rank's RNG state); every node lays
    out the same restored snapshot, so each rank resumes from its own state. Anywhere else no
    single machine's attempt would hold the whole checkpoint, nor restore it on the others."""
    if not _spread(node):
        if local == world:
            return []
        return [
            f"a world of {world} processes on several machines ({local} on this one): not "
            "supported yet outside a multi-node stage of a cluster backend (docs/cluster.md)"
        ]
    assert node is not None
    if local != 1 or world != node.nodes:
        return [
            f"a world of {world} processes ({local} on this node) in a stage of {node.nodes} "
            "nodes: not supported yet; a multi-node stage's world is one process per node"
        ]
    if rank != node.rank:
        return [
            f"the process of rank {rank} runs on node {node.rank}: not supported yet; each "
            "node's process must have the node's rank (torchrun: --node_rank, or "
            "$PET_NODE_RANK as nodus sets it)"
        ]
    return []


def _spread(node: protocol.NodePlace | None) -> bool:
    return node is not None and node.nodes > 1


def _node() -> protocol.NodePlace | None:
    """The node of a multi-node stage the runner says this program runs on (its settings)."""
    if protocol.ENV_CONTROL_DIR not in os.environ:
        return None  # not under nodus (a bare run of the program)
    try:
        return ControlDir.from_environment().settings().node
    except (OSError, ValueError):
        return None


def _world_size(args: Any) -> int:
    """How many processes train together.

    A launcher's world of one (``torchrun --nproc_per_node 1``) is one process: the Trainer
    sets up a process group of size 1 for it and runs in ``ParallelMode.DISTRIBUTED``, but
    every batch, step and save is that of ``python train.py``. So the size counts, not the
    mode; a process group the program set up itself counts too.
    """
    import torch.distributed as dist

    sizes = [args.world_size]
    if dist.is_available() and dist.is_initialized():
        sizes.append(dist.get_world_size())
    return max(sizes)


def _full_precision(trainer, given) -> list[Finding]:
    """bf16 autocast is the mixed-precision extension, fp16 too but on the CPU.

    On the CPU the Trainer and Accelerate accept ``fp16=True`` and train in float32: no
    autocast (the Trainer's ``cpu_amp`` is bf16 only), no GradScaler (Accelerate makes one for
    accelerators only); a setting without effect is refused, not admitted. On an accelerator
    fp16 trains with Accelerate's GradScaler, whose state the integration saves as the Trainer
    does (``scaler.pt``); ``nodus qualify --extension mixed-precision`` trains an fp16 case
    there besides the bf16 one (:data:`extensions.EXTENSIONS`' ``accelerator_cases``).
    """
    args = trainer.args
    flags = [
        f"{name}=True"
        for name in ("fp16", "bf16", "fp16_full_eval", "bf16_full_eval")
        if getattr(args, name, False)
    ]
    launched = accelerate_precision(trainer)
    if launched != "no" and f"{launched}=True" not in flags:
        # `accelerate launch --mixed_precision bf16` (or its config file) with no flag in the
        # program: the Accelerator reads it from the environment and autocasts all the same.
        flags.append(f"Accelerate's mixed_precision={launched}")
    fp16 = [flag for flag in flags if "fp16" in flag]
    if fp16 and args.device.type == "cpu":
        return [
            f"mixed precision ({', '.join(fp16)}) on cpu: not supported yet on cpu (the Trainer "
            "trains it in float32 there, without autocast or loss scaling); use bf16=True"
        ]
    return (
        [Uses(extensions.MIXED_PRECISION, f"mixed precision ({', '.join(flags)})")] if flags else []
    )


def accelerate_precision(trainer: Any) -> str:
    """The Accelerator's mixed precision (``no``, ``bf16``, ``fp16``): what the training
    arguments asked, or what ``accelerate launch`` set in the environment."""
    return str(getattr(getattr(trainer, "accelerator", None), "mixed_precision", "no") or "no")


HALF_PRECISION = ("torch.bfloat16",)
"""Model state dtypes the mixed-precision extension admits besides float32: a model stored in
bfloat16 resumes bit-identically (tests/hf/test_ext_precision.py); one in float16 trains without
loss scaling and is not supported yet."""


def _model_state(trainer, given) -> list[Finding]:
    import torch

    model = trainer.model
    reasons: list[Finding] = []
    if getattr(model, "is_quantized", False) or getattr(model, "hf_quantizer", None) is not None:
        reasons.append("quantized model; v1 needs a float32 model")
    state = model.state_dict()
    odd = sorted({type(v).__name__ for v in state.values() if not isinstance(v, torch.Tensor)})
    if odd:
        reasons.append(
            f"model state holds non-tensor values ({', '.join(odd)}); v1 needs tensors only"
        )
    floats = {
        str(v.dtype)
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dtype != torch.float32
    }
    half = sorted(floats & set(HALF_PRECISION))
    if half:
        reasons.append(Uses(extensions.MIXED_PRECISION, f"model state in {', '.join(half)}"))
    if floats - set(HALF_PRECISION):
        other = ", ".join(sorted(floats - set(HALF_PRECISION)))
        reasons.append(
            f"model state in {other}: not supported yet (v1 needs float32, or bfloat16 with "
            "the mixed-precision extension)"
        )
    size = sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor))
    if size > HF_MAX_MODEL_STATE_BYTES:
        reasons.append(
            f"model state of {size:,} bytes; v1 allows at most {HF_MAX_MODEL_STATE_BYTES:,}"
        )
    return reasons


def _peft(trainer, given) -> list[Finding]:
    """A ``PeftModel`` (``get_peft_model``) is the peft extension; adapters Transformers added
    to its own model (``model.add_adapter``) save and load by other code, not shown exact."""
    model = trainer.model
    if type(model).__module__.split(".")[0] == "peft":
        return [Uses(extensions.PEFT, f"PEFT model ({type(model).__name__})")]
    if getattr(model, "_hf_peft_config_loaded", False):
        return [
            "adapters added with model.add_adapter(...): not supported yet; wrap the model "
            "with peft.get_peft_model(model, config) instead"
        ]
    return []


def _dataset(trainer, given) -> list[str]:
    import datasets
    import torch

    data = trainer.train_dataset
    if isinstance(data, (datasets.IterableDataset, torch.utils.data.IterableDataset)):
        return [f"streaming data ({type(data).__name__}); v1 needs a map-style datasets.Dataset"]
    if not isinstance(data, datasets.Dataset):
        return [
            f"train_dataset is a {type(data).__name__}; v1 needs a fingerprinted "
            "map-style datasets.Dataset"
        ]
    if not getattr(data, "_fingerprint", None):
        return ["train_dataset has no fingerprint; v1 needs a fingerprinted datasets.Dataset"]
    return []


def _loading(trainer, given) -> list[Finding]:
    args = trainer.args
    reasons: list[Finding] = []
    if args.dataloader_num_workers != 0:
        reasons.append(
            Uses(extensions.WORKERS, f"dataloader_num_workers={args.dataloader_num_workers}")
        )
    reasons.extend(_collator(trainer, given.get("data_collator")))
    if args.dataloader_num_workers != 0 and draws_random_numbers(trainer.data_collator):
        reasons.append(
            f"{type(trainer.data_collator).__name__} masking at random in "
            f"dataloader_num_workers={args.dataloader_num_workers} workers: not supported yet "
            "(each worker's random state is no part of a checkpoint, so a resume cannot rebuild "
            "the masks the workers had drawn ahead; mask in the main process with "
            "dataloader_num_workers=0)"
        )
    if not args.accelerator_config.use_seedable_sampler:
        reasons.append(
            "accelerator_config.use_seedable_sampler=False; v1 needs the seedable "
            "sampler to replay an epoch's order"
        )
    return reasons


RANDOM_OR_PADDING_COLLATORS = (
    "DataCollatorForLanguageModeling",
    "DataCollatorForWholeWordMask",
    "DataCollatorForSeq2Seq",
    "DataCollatorForTokenClassification",
)
"""The library's collators the collators extension admits, by exact class in
``transformers.data.data_collator``: they mask at random or pad by their tokenizer."""


def draws_random_numbers(collator: Any) -> bool:
    """Whether one of the library's collators masks at random (``mlm=True``, whole words)."""
    from transformers.data import data_collator as library

    kind = type(collator)
    if kind is library.DataCollatorForWholeWordMask:
        return True
    return kind is library.DataCollatorForLanguageModeling and bool(collator.mlm)


def _collator(trainer, collator: Any) -> list[Finding]:
    """The library's collators, given or not, as the Transformers examples pass them.

    None (the Trainer picks ``DataCollatorWithPadding`` of its tokenizer, or
    ``default_data_collator``), ``default_data_collator`` itself, or an exact
    ``DataCollatorWithPadding`` whose tokenizer *is* the Trainer's ``processing_class``. Its
    padding settings may be anything: they are the program's configuration, deterministic, and
    recorded in the identity of every checkpoint (``identity.collator``), so a resume with other
    settings is refused. The collators extension admits the masking and sequence collators of
    :data:`RANDOM_OR_PADDING_COLLATORS` on the same terms, and the trl extension TRL's own
    collator of a trainer of :data:`TRL_TRAINERS` (named like Transformers' collators, so a
    refusal names a collator's module too). Anything else is code of the program's own and
    stays outside.
    """
    from transformers.data import data_collator as library

    if collator is None or collator is library.default_data_collator:
        return []
    kind = type(collator)
    if _trl_collator(trainer, collator):
        return [Uses(extensions.TRL, f"TRL's {kind.__name__}")]
    admitted = kind is library.DataCollatorWithPadding or (
        kind.__name__ in RANDOM_OR_PADDING_COLLATORS
        and getattr(library, kind.__name__, None) is kind
    )
    if not admitted:
        return [
            f"custom data collator ({_name(collator)}) of "
            f"{getattr(collator, '__module__', None) or kind.__module__}; v1 needs the "
            "library's default: none, default_data_collator or DataCollatorWithPadding of the "
            "Trainer's tokenizer (with the 'trl' extension: TRL's own, for its trainer)"
        ]
    if trainer.processing_class is None or collator.tokenizer is not trainer.processing_class:
        return [
            f"{kind.__name__} of a tokenizer that is not the Trainer's processing_class; "
            "v1 needs the Trainer's own tokenizer (pass processing_class=tokenizer)"
        ]
    if kind is library.DataCollatorWithPadding:
        return []
    return [Uses(extensions.COLLATORS, kind.__name__)]


def _callbacks(trainer, given) -> list[str]:
    custom = [
        _name(cb)
        for cb in trainer.callback_handler.callbacks
        if not type(cb).__module__.startswith(("transformers.", "nodus."))
    ]
    return (
        [f"custom callbacks ({', '.join(custom)}); v1 allows built-in callbacks only"]
        if custom
        else []
    )


def _plain_trainer(trainer, given) -> list[Finding]:
    from transformers import Trainer

    reasons: list[Finding] = []
    kind = type(trainer)
    if is_trl_trainer(kind):
        reasons.append(Uses(extensions.TRL, f"TRL's {kind.__name__}"))
        if getattr(trainer.args, "sync_ref_model", False):
            reasons.append(
                "sync_ref_model=True: not supported yet (the reference model it updates is in "
                "no checkpoint, so a resume would score against another reference)"
            )
    elif kind is not Trainer:
        reasons.append(
            f"Trainer subclass {kind.__module__}.{kind.__qualname__}; v1 needs the plain "
            "transformers.Trainer, or exactly TRL's SFTTrainer or DPOTrainer (the 'trl' extension)"
        )
    if given.get("compute_loss_func") is not None:
        reasons.append("custom loss (compute_loss_func); v1 needs the model's own loss")
    return reasons


TRL_TRAINERS = {
    "trl.trainer.sft_trainer.SFTTrainer": (
        "trl.trainer.sft_trainer.DataCollatorForLanguageModeling",
    ),
    "trl.trainer.dpo_trainer.DPOTrainer": ("trl.trainer.dpo_trainer.DataCollatorForPreference",),
}
"""The trl extension's trainers, each with the collators of TRL's own it builds for text (what
``trl sft`` and ``trl dpo`` train with), by module and name: exactly these classes."""


def _qualified_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _exactly(kind: type, names: Any) -> bool:
    """``kind`` is the class its module defines under one of ``names`` (not a namesake)."""
    module = sys.modules.get(kind.__module__)
    return _qualified_name(kind) in names and getattr(module, kind.__qualname__, None) is kind


def is_trl_trainer(kind: type) -> bool:
    return _exactly(kind, TRL_TRAINERS)


def _trl_collator(trainer: Any, collator: Any) -> bool:
    kind = type(trainer)
    return is_trl_trainer(kind) and _exactly(type(collator), TRL_TRAINERS[_qualified_name(kind)])


def _optimizer(trainer, given) -> list[str]:
    optimizers = given.get("optimizers") or (None, None)
    if any(part is not None for part in optimizers) or given.get("optimizer_cls_and_kwargs"):
        return ["optimizer or scheduler passed in; v1 needs the Trainer to create both"]
    return []


def _arguments(trainer, given) -> list[str]:
    args = trainer.args
    wrong = [
        f"{name}=True"
        for name in ("save_only_model", "ignore_data_skip", "load_best_model_at_end", "push_to_hub")
        if getattr(args, name)
    ]
    return [f"{flag}; v1 needs it False" for flag in wrong]


def _name(thing: Any) -> str:
    kind = thing if isinstance(thing, type) else type(thing)
    return getattr(thing, "__name__", None) or kind.__name__


RULES: tuple[Rule, ...] = (
    _one_process_one_device,
    _full_precision,
    _model_state,
    _peft,
    _dataset,
    _loading,
    _callbacks,
    _plain_trainer,
    _optimizer,
    _arguments,
)


TRL_METHODS = trainer_methods()
"""TRL's trainers that a managed method (``framework = ...``, docs/methods.md) trains."""


def trl_methods(kind: type) -> list[str]:
    """The managed methods that train what a trainer of ``kind`` is: TRL's class it is or
    subclasses (a subclass of ``SFTTrainer``: ``sft``); [] for any other class."""
    return [
        method
        for name, method in TRL_METHODS.items()
        if any(c.__name__ == name and c.__module__.startswith("trl.") for c in kind.__mro__)
    ]


def ways_forward(
    to_qualify: Sequence[str], environment: bool, methods: Sequence[str], outside: bool
) -> list[str]:
    """What a person can do about a refused program, only the ways that fit it.

    ``to_qualify``: the extensions it uses that are not qualified here; ``environment``: the
    versions are not qualified; ``methods``: the managed methods that train its TRL trainer
    (:func:`trl_methods`); ``outside``: a reason no qualification lifts.
    """
    ways = []
    if (to_qualify or environment) and not outside:
        command = extensions.qualify_command(list(to_qualify)) if to_qualify else "nodus qualify"
        if environment and to_qualify:
            command = f"nodus qualify && {command}"
        ways.append(f"qualify this machine for it: `{command}`, then run again")
    if methods:
        shown = " or ".join(f'framework = "{m}"' for m in methods)
        ways.append(
            f"{shown} instead of a command: nodus's own program trains TRL's trainer, "
            "exactly, from the workload file (docs/methods.md)"
        )
    ways.append(
        'integration = "auto": the program runs unprepared; nodus protects only what it saves '
        "by itself (the directory contract), so a recovery is not bit-identical"
    )
    contract = (
        "the directory contract (no integration): the program saves checkpoint folders under "
        "a checkpoint path and resumes from the one nodus restores, named by [continuity] "
        "resume_args (docs/recovery.md)"
    )
    if methods:  # the scripts parse --resume_from_checkpoint and never pass it to train()
        contract += "; `trl sft` and `trl dpo` ignore it and restart at step 0"
    ways.append(contract)
    return ways
