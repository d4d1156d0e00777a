"""An Accelerate training loop that checkpoints with ``save_state`` and resumes with ``load_state``.

    python accelerate_state.py --steps 30 --save-every 5 --log PATH
                               [--naming checkpoint|step|automatic] [--resume-from FOLDER]
                               [--sleep 0.0] [--gate PATH]

The shape of Accelerate's examples/by_feature/checkpointing.py: a model, AdamW, an LR scheduler
and a DataLoader go through ``accelerator.prepare``; two objects of the program's own are
registered with ``register_for_checkpointing``: ``EMA`` (a moving average of the weights) and
``Progress`` (the step), so the whole state lives in Accelerate's own files. ``save_state``
writes its folder in place, file by file; nothing in it marks a folder as complete.
``--sleep`` slows each step down until the file ``--gate`` exists (a test creates it once it is
done killing the program).

``--naming`` picks where the folders go, under ``$NODUS_CHECKPOINT_DIR`` (default ``state``):

* ``checkpoint``: ``save_state("<state>/checkpoint-<step>")``; resumes from the highest one.
* ``step``: ``save_state("<state>/step_<step>")``, as checkpointing.py does; same resume.
* ``automatic``: ``ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=2)``, so
  ``save_state()`` writes ``<state>/checkpoints/checkpoint_<i>`` and deletes all but the newest
  two; it resumes with ``load_state()`` and sets the iteration past the loaded folder, since
  Accelerate refuses to save into an existing one.

``--resume-from FOLDER`` loads exactly that folder instead, like checkpointing.py's
``--resume_from_checkpoint``; the step comes from the loaded ``Progress``. After a resume the
loop skips the batches the step says were consumed (``skip_first_batches``), so data, and the
global RNG Accelerate restores (it drives a little input noise), match an uninterrupted run.

Every resume and save is appended to ``--log`` as ``<pid> <event>``: ``resume <folder> step=<n>``
(the folder relative to the state folder, or as given to ``--resume-from``) or ``start fresh``,
``save-begin <folder> step=<n>``, ``save-end <folder> step=<n>``, ``done``. At the end
``out/result.json`` holds ``{"step", "digest"}``, a SHA-256 of the parameters, the optimizer and
scheduler state, the EMA and the step.
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
from accelerate.utils import ProjectConfiguration
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 8
SAMPLES = 24  # six batches of four: a 30-step run goes through five epochs
BATCH = 4
NAMING = {"checkpoint": re.compile(r"^checkpoint-(\d+)$"), "step": re.compile(r"^step_(\d+)$")}
AUTOMATIC = re.compile(r"^checkpoint_(\d+)$")


class EMA:
    """An exponential moving average of the model's weights, checkpointed with the rest."""

    def __init__(self, model: nn.Module, decay: float = 0.9) -> None:
        self.decay = decay
        self.shadow = {name: p.detach().clone() for name, p in model.named_parameters()}

    def update(self, model: nn.Module) -> None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                self.shadow[name].mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "shadow": {k: v.clone() for k, v in self.shadow.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.decay = state["decay"]
        for name, value in state["shadow"].items():
            self.shadow[name].copy_(value)


class Progress:
    """The training step, kept in Accelerate's checkpoint rather than in a side file."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


def make_accelerator(naming: str, state_dir: str) -> Accelerator:
    # cpu=True: the bits must not depend on whether the machine has an accelerator.
    if naming != "automatic":
        return Accelerator(cpu=True)
    config = ProjectConfiguration(
        project_dir=state_dir, automatic_checkpoint_naming=True, total_limit=2
    )
    return Accelerator(cpu=True, project_dir=state_dir, project_config=config)


def make_loader() -> DataLoader:
    data = torch.Generator().manual_seed(1)
    inputs = torch.randn(SAMPLES, FEATURES, generator=data)
    targets = inputs @ torch.randn(FEATURES, FEATURES, generator=data)
    # The loader's own generator: each new iterator draws a seed from it, and drawing from the
    # global RNG instead would put a resumed run (which builds one extra iterator) a draw off.
    return DataLoader(
        TensorDataset(inputs, targets),
        batch_size=BATCH,
        shuffle=False,
        generator=torch.Generator().manual_seed(2),
    )


def numbered(folder: str, pattern: re.Pattern) -> list[int]:
    """The numbers of the folders in ``folder`` whose names match, ascending."""
    if not os.path.isdir(folder):
        return []
    found = (pattern.match(name) for name in os.listdir(folder))
    return sorted(int(match.group(1)) for match in found if match)


def resume(accelerator, args, state_dir: str, progress: Progress, log) -> None:
    """Load the folder the naming scheme (or --resume-from) points at, if there is one."""
    automatic = os.path.join(state_dir, "checkpoints")
    if args.resume_from:
        accelerator.load_state(args.resume_from)
        loaded = args.resume_from
    elif args.naming == "automatic":
        if not numbered(automatic, AUTOMATIC):
            log("start fresh")
            return
        accelerator.load_state()  # Accelerate's own pick: the highest checkpoint_<i>
        loaded = f"checkpoints/checkpoint_{numbered(automatic, AUTOMATIC)[-1]}"
    else:
        steps = numbered(state_dir, NAMING[args.naming])
        if not steps:
            log("start fresh")
            return
        name = "checkpoint-{}" if args.naming == "checkpoint" else "step_{}"
        loaded = name.format(steps[-1])
        accelerator.load_state(os.path.join(state_dir, loaded))
    if args.naming == "automatic" and numbered(automatic, AUTOMATIC):
        # save_state() would otherwise aim at checkpoint_0 again and refuse it.
        accelerator.project_configuration.iteration = numbered(automatic, AUTOMATIC)[-1] + 1
    log(f"resume {loaded} step={progress.step}")


def save(accelerator, args, state_dir: str, step: int, log) -> None:
    if args.naming == "automatic":
        name = f"checkpoints/checkpoint_{accelerator.project_configuration.iteration}"
        log(f"save-begin {name} step={step}")
        accelerator.save_state()
    else:
        name = f"checkpoint-{step}" if args.naming == "checkpoint" else f"step_{step}"
        log(f"save-begin {name} step={step}")
        accelerator.save_state(os.path.join(state_dir, name))
    log(f"save-end {name} step={step}")


def train(accelerator, args, parts, progress: Progress, ema: EMA, state_dir: str, log) -> None:
    """Epochs over the loader until --steps, starting mid-epoch where the step says."""
    model, optimizer, loader, scheduler = parts
    while progress.step < args.steps:
        consumed = progress.step % len(loader)
        batches = accelerator.skip_first_batches(loader, consumed) if consumed else loader
        for inputs, targets in batches:
            if not (args.gate and os.path.exists(args.gate)):
                time.sleep(args.sleep)
            noisy = inputs + 0.01 * torch.randn_like(inputs)
            loss = (model(noisy) - targets).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            ema.update(accelerator.unwrap_model(model))
            progress.step += 1
            if progress.step % args.save_every == 0:
                save(accelerator, args, state_dir, progress.step, log)
            if progress.step >= args.steps:
                return


def digest(model: nn.Module, optimizer, scheduler, ema: EMA, progress: Progress) -> str:
    """SHA-256 of everything a checkpoint holds, in a fixed order."""
    hasher = hashlib.sha256()

    def add(name: str, value) -> None:
        hasher.update(name.encode())
        if torch.is_tensor(value):
            hasher.update(value.detach().contiguous().numpy().tobytes())
        else:
            hasher.update(repr(value).encode())

    for name, tensor in model.state_dict().items():
        add(f"model.{name}", tensor)
    state = optimizer.state_dict()["state"]
    for index in sorted(state):
        for key in sorted(state[index]):
            add(f"optimizer.{index}.{key}", state[index][key])
    for key, value in sorted(scheduler.state_dict().items()):
        add(f"scheduler.{key}", value)
    for name in sorted(ema.shadow):
        add(f"ema.{name}", ema.shadow[name])
    add("step", progress.step)
    return hasher.hexdigest()


def make_log(path: str | None):
    def log(event: str) -> None:
        if path:
            with open(path, "a") as handle:
                handle.write(f"{os.getpid()} {event}\n")
                handle.flush()
        print(f"accelerate_state: {event}", flush=True)

    return log


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="total optimizer steps")
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--log", default=None, help="file to append '<pid> <event>' lines to")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds slept per step")
    parser.add_argument("--gate", default=None, help="no more sleeping once this file exists")
    naming = ["checkpoint", "step", "automatic"]
    parser.add_argument("--naming", choices=naming, default="checkpoint")
    parser.add_argument("--resume-from", default="", help="load exactly this folder")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    log = make_log(args.log)
    torch.set_num_threads(1)  # the bits cannot depend on how many cores there are
    torch.manual_seed(0)
    state_dir = os.environ.get("NODUS_CHECKPOINT_DIR", "state")
    os.makedirs(state_dir, exist_ok=True)
    accelerator = make_accelerator(args.naming, state_dir)
    model = nn.Linear(FEATURES, FEATURES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.8)
    parts = accelerator.prepare(model, optimizer, make_loader(), scheduler)
    ema, progress = EMA(accelerator.unwrap_model(parts[0])), Progress()
    accelerator.register_for_checkpointing(ema, progress)
    resume(accelerator, args, state_dir, progress, log)
    train(accelerator, args, parts, progress, ema, state_dir, log)
    model, optimizer, _, scheduler = parts
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        result = digest(accelerator.unwrap_model(model), optimizer, scheduler, ema, progress)
        json.dump({"step": progress.step, "digest": result}, handle)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
