"""A causal language model trained with Accelerate, shaped like Transformers' run_clm_no_trainer.

    python accelerate_lm.py --max_train_steps 30 --checkpointing_steps 5 --output_dir lm
                            --log PATH [--resume_from_checkpoint FOLDER] [--save state|pretrained]
                            [--sleep 0.0] [--gate PATH]

A tiny GPT-2 built from a config (no download), AdamW and a linear schedule from
``transformers.get_scheduler``, a DataLoader of fixed token rows, all through
``accelerator.prepare``. Every ``--checkpointing_steps`` it saves ``<output_dir>/step_<n>``:

* ``--save state`` (the example's way): ``accelerator.save_state``: the weights, optimizer,
  scheduler, sampler and RNG states, no config, so that folder does not load with
  ``from_pretrained``. ``--resume_from_checkpoint FOLDER`` loads it again with ``load_state``
  and takes the step from the folder's name, skipping the batches already trained on.
* ``--save pretrained``: ``save_pretrained`` (config and weights) and the optimizer's state in
  ``optimizer.pt``, as a custom loop that keeps loadable models does (no resuming).

At the end ``save_pretrained(output_dir)``, like the example. ``--sleep`` slows each step down
until the file ``--gate`` exists. Every resume and save is appended to ``--log`` as
``<pid> <event>``: ``resume <folder> step=<n>`` or ``start fresh``, ``save-begin step_<n>
step=<n>``, ``save-end step_<n> step=<n>``, ``done``. ``out/result.json`` holds ``{"step",
"digest"}``, a SHA-256 of the parameters and the optimizer state.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel, get_scheduler

ROWS, LENGTH, BATCH = 24, 12, 4  # six batches an epoch


def make_model() -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=64,
        n_positions=LENGTH,
        n_embd=16,
        n_layer=1,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config)


def make_loader() -> DataLoader:
    rows = torch.randint(0, 64, (ROWS, LENGTH), generator=torch.Generator().manual_seed(1))
    return DataLoader(list(rows), batch_size=BATCH, shuffle=False)


def digest(model, optimizer) -> str:
    hasher = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        hasher.update(name.encode())
        hasher.update(tensor.detach().contiguous().numpy().tobytes())
    state = optimizer.state_dict()["state"]
    for index in sorted(state):
        for key in sorted(state[index]):
            value = state[index][key]
            hasher.update(f"{index}.{key}".encode())
            if torch.is_tensor(value):
                hasher.update(value.contiguous().numpy().tobytes())
            else:
                hasher.update(repr(value).encode())
    return hasher.hexdigest()


def make_log(path: str | None):
    def log(event: str) -> None:
        if path:
            with open(path, "a") as handle:
                handle.write(f"{os.getpid()} {event}\n")
                handle.flush()
        print(f"accelerate_lm: {event}", flush=True)

    return log


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_train_steps", type=int, default=30)
    parser.add_argument("--checkpointing_steps", type=int, default=5)
    parser.add_argument("--output_dir", default="lm")
    parser.add_argument("--resume_from_checkpoint", default="")
    parser.add_argument("--save", choices=["state", "pretrained"], default="state")
    parser.add_argument("--log", default=None)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--gate", default=None)
    return parser.parse_args()


def save(accelerator, model, optimizer, args, step: int, log) -> None:
    folder = os.path.join(args.output_dir, f"step_{step}")
    log(f"save-begin step_{step} step={step}")
    if args.save == "state":
        accelerator.save_state(folder)
    else:
        accelerator.unwrap_model(model).save_pretrained(folder)
        torch.save(optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
    log(f"save-end step_{step} step={step}")


def main() -> int:
    args = parse_args()
    log = make_log(args.log)
    torch.set_num_threads(1)  # the bits cannot depend on how many cores there are
    set_seed(0)
    accelerator = Accelerator(cpu=True)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    scheduler = get_scheduler(
        "linear", optimizer, num_warmup_steps=2, num_training_steps=args.max_train_steps
    )
    model, optimizer, loader, scheduler = accelerator.prepare(
        model, optimizer, make_loader(), scheduler
    )
    step = 0
    if args.resume_from_checkpoint:
        accelerator.load_state(args.resume_from_checkpoint)
        step = int(re.fullmatch(r"step_(\d+)", os.path.basename(args.resume_from_checkpoint))[1])
        log(f"resume {args.resume_from_checkpoint} step={step}")
    else:
        log("start fresh")
    model.train()
    while step < args.max_train_steps:
        skip = step % len(loader)
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        for batch in batches:
            if not (args.gate and os.path.exists(args.gate)):
                time.sleep(args.sleep)
            loss = model(input_ids=batch, labels=batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % args.checkpointing_steps == 0:
                save(accelerator, model, optimizer, args, step, log)
            if step >= args.max_train_steps:
                break
    accelerator.unwrap_model(model).save_pretrained(args.output_dir)
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump(
            {"step": step, "digest": digest(accelerator.unwrap_model(model), optimizer)}, handle
        )
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
