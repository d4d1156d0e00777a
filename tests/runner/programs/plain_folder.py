"""Plain PyTorch that builds each checkpoint folder aside and publishes it with one rename.

    python plain_folder.py --steps 60 --save-every 10 --log PATH [--sleep 0.0] [--keep 2]
                           [--gate PATH]

The careful hand-written pattern: ``checkpoint-<step>`` is assembled in a fresh folder under
``$TMPDIR`` (``model.pt``, ``optimizer.pt``, then ``trainer.pt`` with the step and the RNG state,
each written with ``torch.save``) and moved into ``$NODUS_CHECKPOINT_DIR`` (default ``state``)
with a single ``os.rename``, so a reader sees either no folder or a whole one. After publishing,
only the newest ``--keep`` folders are kept. On start it resumes from the highest-numbered one.
``$TMPDIR`` must be on the same file system as the state folder for the rename to work.

``--sleep`` slows each step down until the file ``--gate`` exists (a test creates it once it is
done killing the program).

Training is a small ``nn.Linear`` and AdamW on batches drawn from the global RNG, whose state
travels in ``trainer.pt``, so a resumed run draws what an uninterrupted one would have.

Every resume and save is appended to ``--log`` as ``<pid> <event>``: ``resume checkpoint-<n>
step=<n>`` or ``start fresh``, ``save-begin checkpoint-<n> step=<n>``, ``save-end checkpoint-<n>
step=<n>`` (after the rename), ``done``. At the end ``out/result.json`` holds
``{"step", "digest"}``, the digest a SHA-256 of the parameters and the optimizer state.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time

import torch
from torch import nn

FEATURES = 64
BATCH = 4
FOLDER = re.compile(r"^checkpoint-(\d+)$")


def build() -> tuple[nn.Linear, torch.optim.Optimizer]:
    model = nn.Linear(FEATURES, FEATURES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    return model, optimizer


def train_step(model: nn.Linear, optimizer: torch.optim.Optimizer) -> None:
    inputs = torch.randn(BATCH, FEATURES)
    targets = inputs.flip(1)  # something learnable, so the weights keep changing
    loss = (model(inputs) - targets).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def checkpoints(state_dir: str) -> list[int]:
    """The steps of the published folders, oldest first."""
    found = (FOLDER.match(name) for name in os.listdir(state_dir))
    return sorted(int(match.group(1)) for match in found if match)


def save(state_dir: str, model, optimizer, step: int, keep: int, log) -> None:
    """Write the three files aside, rename the folder in, then drop the oldest ones."""
    name = f"checkpoint-{step}"
    log(f"save-begin {name} step={step}")
    staging = tempfile.mkdtemp(prefix=f"{name}.", dir=os.environ.get("TMPDIR"))
    torch.save(model.state_dict(), os.path.join(staging, "model.pt"))
    torch.save(optimizer.state_dict(), os.path.join(staging, "optimizer.pt"))
    trainer = {"step": step, "rng": torch.get_rng_state()}
    torch.save(trainer, os.path.join(staging, "trainer.pt"))
    os.rename(staging, os.path.join(state_dir, name))
    log(f"save-end {name} step={step}")
    for old in checkpoints(state_dir)[:-keep]:
        shutil.rmtree(os.path.join(state_dir, f"checkpoint-{old}"))


def resume(state_dir: str, model, optimizer, log) -> int:
    """Load the highest-numbered folder, if any; return its step."""
    steps = checkpoints(state_dir)
    if not steps:
        log("start fresh")
        return 0
    folder = os.path.join(state_dir, f"checkpoint-{steps[-1]}")
    model.load_state_dict(torch.load(os.path.join(folder, "model.pt")))
    optimizer.load_state_dict(torch.load(os.path.join(folder, "optimizer.pt")))
    trainer = torch.load(os.path.join(folder, "trainer.pt"))
    torch.set_rng_state(trainer["rng"])
    log(f"resume checkpoint-{steps[-1]} step={trainer['step']}")
    return trainer["step"]


def digest(model: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """SHA-256 of the parameters and the optimizer state, in a fixed order."""
    hasher = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        hasher.update(name.encode())
        hasher.update(tensor.contiguous().numpy().tobytes())
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
        print(f"plain_folder: {event}", flush=True)

    return log


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="total optimizer steps")
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--log", default=None, help="file to append '<pid> <event>' lines to")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds slept per step")
    parser.add_argument("--gate", default=None, help="no more sleeping once this file exists")
    parser.add_argument("--keep", type=int, default=2, help="newest folders kept")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    log = make_log(args.log)
    torch.set_num_threads(1)  # the bits cannot depend on how many cores there are
    torch.manual_seed(0)
    state_dir = os.environ.get("NODUS_CHECKPOINT_DIR", "state")
    os.makedirs(state_dir, exist_ok=True)
    model, optimizer = build()
    step = resume(state_dir, model, optimizer, log)
    while step < args.steps:
        if not (args.gate and os.path.exists(args.gate)):
            time.sleep(args.sleep)
        train_step(model, optimizer)
        step += 1
        if step % args.save_every == 0:
            save(state_dir, model, optimizer, step, args.keep, log)
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump({"step": step, "digest": digest(model, optimizer)}, handle)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
