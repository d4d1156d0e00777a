"""A training script in the shape of the Transformers example ``run_clm_no_trainer.py`` and of
Accelerate's ``examples/by_feature/checkpointing.py`` (the first was written from the second).

    python accelerate_example.py --output_dir out --checkpointing_steps 5 [--num_train_epochs 3]
                                 [--max_train_steps N] [--resume_from_checkpoint FOLDER]
                                 [--with_tracking] [--seed 42] [--log PATH] [--sleep 0.0]
                                 [--gate PATH] [--exact] [--save state|pretrained]

Its save and resume paths are theirs: ``set_seed(seed)`` at start; a causal language model
(a tiny GPT-2 built from a config, dropout on) and a shuffled ``DataLoader`` through
``accelerator.prepare``; ``accelerator.save_state("<output_dir>/step_<n>")`` every
``--checkpointing_steps`` optimizer steps (or ``epoch_<e>`` with ``epoch``); with
``--resume_from_checkpoint FOLDER``, ``accelerator.load_state(FOLDER)``, the step read back from
the folder's name, the epoch it falls in started again and its first batches skipped
(``accelerator.skip_first_batches``); at the end ``save_pretrained(output_dir)``. With
``--with_tracking`` the loss of each epoch goes to Accelerate's TensorBoard tracker under
``output_dir``. ``load_state`` puts back the RNG states as they were at the save, mid-epoch, and
the resumed epoch's order is drawn from them: not the order the uninterrupted run drew at the
start of that epoch.

For tests only, ``--exact`` takes the shuffle and the dropout away, so that a resume ends exactly
as an uninterrupted run (what a test of nodus's own losses needs), and ``--save pretrained``
saves each ``step_<n>`` with ``save_pretrained`` (config and weights) and the optimizer's state
in ``optimizer.pt`` instead, as a loop that keeps loadable models does (it does not resume).
Also for tests only (each also from ``$TEST_LOG``, ``$TEST_SLEEP``, ``$TEST_GATE``): every save and
resume is appended to ``--log`` as ``<pid> <event>`` (``resume <folder> step=<n>``, ``start
fresh``, ``save-begin``/``save-end <folder> step=<n>``, ``done``); ``--sleep`` slows each step
until ``--gate`` exists; ``out/result.json`` (or ``$TEST_RESULT``) holds ``{"step",
"digest"}`` of the weights at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator, get_scheduler

BLOCK = 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="out")
    parser.add_argument("--checkpointing_steps", default=None)
    parser.add_argument("--resume_from_checkpoint", default=None)
    parser.add_argument("--num_train_epochs", type=int, default=3)
    parser.add_argument("--max_train_steps", type=int, default=None)
    parser.add_argument("--per_device_train_batch_size", type=int, default=4)
    parser.add_argument("--learning_rate", type=float, default=5e-3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--with_tracking", action="store_true")
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--save", choices=["state", "pretrained"], default="state")
    parser.add_argument("--log", default=os.environ.get("TEST_LOG"))
    parser.add_argument("--sleep", type=float, default=float(os.environ.get("TEST_SLEEP", "0")))
    parser.add_argument("--gate", default=os.environ.get("TEST_GATE"))
    # The real scripts' model and dataset arguments are taken and left unused: the model is
    # built from a config and the corpus is synthetic (no hub downloads).
    for name in ("--model_name_or_path", "--dataset_name", "--dataset_config_name"):
        parser.add_argument(name, default=None)
    return parser.parse_args()


def dataset() -> list[dict[str, torch.Tensor]]:
    """Blocks of a synthetic corpus (a fixed generator: the same whatever the seed)."""
    fixed = torch.Generator().manual_seed(0)
    tokens = torch.randint(64, (48 * BLOCK,), generator=fixed)
    return [
        {"input_ids": block, "labels": block.clone()} for block in tokens.view(-1, BLOCK).unbind()
    ]


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)

    accelerator = _accelerator(args.output_dir, args.with_tracking)
    set_seed(args.seed)
    model = _model(exact=args.exact)
    train_dataloader = DataLoader(
        dataset(),
        shuffle=not args.exact,
        collate_fn=default_data_collator,
        batch_size=args.per_device_train_batch_size,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    steps_per_epoch = len(train_dataloader)
    max_train_steps = args.max_train_steps or args.num_train_epochs * steps_per_epoch
    num_train_epochs = -(-max_train_steps // steps_per_epoch)
    lr_scheduler = get_scheduler(
        "linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=max_train_steps
    )
    model, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, lr_scheduler
    )
    checkpointing_steps = _checkpointing_steps(args.checkpointing_steps)
    if args.with_tracking:
        accelerator.init_trackers("clm_no_trainer", {"seed": args.seed})

    completed_steps, starting_epoch, resume_step = 0, 0, None
    if args.resume_from_checkpoint:
        accelerator.load_state(args.resume_from_checkpoint)
        starting_epoch, completed_steps, resume_step = _resume_point(
            args.resume_from_checkpoint, steps_per_epoch
        )
        _note(args.log, f"resume {args.resume_from_checkpoint} step={completed_steps}")
    else:
        _note(args.log, "start fresh")

    for epoch in range(starting_epoch, num_train_epochs):
        model.train()
        total_loss = 0.0
        resumed = epoch == starting_epoch
        active_dataloader = _epoch_loader(accelerator, train_dataloader, resumed, resume_step)
        for batch in active_dataloader:
            _pace(args.gate, args.sleep)
            outputs = model(**batch)
            total_loss += outputs.loss.item()
            accelerator.backward(outputs.loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1
            if isinstance(checkpointing_steps, int) and completed_steps % checkpointing_steps == 0:
                _save(
                    args, accelerator, model, optimizer, f"step_{completed_steps}", completed_steps
                )
            if completed_steps >= max_train_steps:
                break
        if args.with_tracking:
            accelerator.log(
                {"train_loss": total_loss / steps_per_epoch, "epoch": epoch},
                step=completed_steps,
            )
        if checkpointing_steps == "epoch":
            _save(args, accelerator, model, optimizer, f"epoch_{epoch}", completed_steps)

    accelerator.end_training()
    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(args.output_dir, safe_serialization=True)
    _write_result(unwrapped, completed_steps)
    _note(args.log, "done")
    assert math.isfinite(total_loss)
    return 0


def _save(args, accelerator, model, optimizer, folder: str, step: int) -> None:
    """A checkpoint folder: Accelerate's whole state, or the weights and the optimizer's."""
    path = os.path.join(args.output_dir, folder)
    _note(args.log, f"save-begin {path} step={step}")
    if args.save == "state":
        accelerator.save_state(path)
    else:
        accelerator.unwrap_model(model).save_pretrained(path)
        torch.save(optimizer.state_dict(), os.path.join(path, "optimizer.pt"))
    _note(args.log, f"save-end {path} step={step}")


def _epoch_loader(accelerator, loader, resumed: bool, skip: int | None):
    """The epoch's loader: the resumed epoch's skips the batches trained before the save."""
    if not resumed or skip is None:
        return loader
    return accelerator.skip_first_batches(loader, skip)


def _pace(gate: str | None, sleep: float) -> None:
    """The simulated work of a step: ``sleep`` seconds, none once the ``gate`` file exists."""
    if not (gate and os.path.exists(gate)):
        time.sleep(sleep)


def _note(log: str | None, event: str) -> None:
    """An event of the program: on stdout, and in ``log`` (with the pid) when one is given."""
    if log:
        with open(log, "a") as handle:
            handle.write(f"{os.getpid()} {event}\n")
    print(f"accelerate_example: {event}", flush=True)


def _accelerator(output_dir: str, with_tracking: bool) -> Accelerator:
    """The Accelerator, logging to TensorBoard under ``output_dir`` with ``--with_tracking``."""
    if with_tracking:
        return Accelerator(log_with="tensorboard", project_dir=output_dir)
    return Accelerator()


def _model(exact: bool) -> GPT2LMHeadModel:
    """A one-layer GPT-2 built from a config; ``exact`` turns dropout off."""
    config = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=BLOCK)
    if exact:
        config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
    return GPT2LMHeadModel(config)


def _checkpointing_steps(value: str | None) -> int | str | None:
    """``--checkpointing_steps``: a number of steps, or ``epoch``, as the upstream script."""
    if value is not None and value.isdigit():
        return int(value)
    return value


def _resume_point(checkpoint: str, steps_per_epoch: int) -> tuple[int, int, int | None]:
    """(starting epoch, completed steps, batches of the starting epoch to skip) of a resume
    from ``epoch_<e>`` or ``step_<n>``, read from the folder's name as the upstream script."""
    name = os.path.basename(checkpoint.rstrip("/"))
    if "epoch" in name:
        starting_epoch = int(name.replace("epoch_", "")) + 1
        return starting_epoch, starting_epoch * steps_per_epoch, None
    resume_step = int(name.replace("step_", ""))
    starting_epoch = resume_step // steps_per_epoch
    return starting_epoch, resume_step, resume_step - starting_epoch * steps_per_epoch


def _write_result(model, completed_steps: int) -> None:
    """The step reached and a digest of the final weights, for the test to compare."""
    hasher = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        hasher.update(name.encode())
        hasher.update(tensor.contiguous().numpy().tobytes())
    result = os.environ.get("TEST_RESULT") or os.path.join("out", "result.json")
    os.makedirs(os.path.dirname(result), exist_ok=True)
    with open(result, "w") as handle:
        json.dump({"step": completed_steps, "digest": hasher.hexdigest()}, handle)


if __name__ == "__main__":
    sys.exit(main())
