"""Plain PyTorch that overwrites one checkpoint file in place: the most common training script.

    python torch_inplace.py --steps 40 --save-every 10 --log PATH [--path ckpt.pt] [--mb 100]
                            [--sleep 0.0] [--gate PATH] [--step-key iter_num] [--save-on-resume]

Every ``--save-every`` steps it calls ``torch.save({"model", "optimizer", "iter_num", "rng"},
path)`` straight onto ``--path`` (default ``ckpt.pt`` in the working directory), nanoGPT's way:
no temporary file, no rename, the step beside the weights under ``--step-key`` (nanoGPT's
``iter_num`` by default; a key nodus does not know, such as ``progress``, makes a checkpoint whose
step nodus cannot find). ``torch.save`` truncates the file and streams into it, so a kill during
the save leaves a torn file this program cannot load; catching that is what nodus is for. On
start it loads the file if there is one and carries on from its step; with
``--save-on-resume`` it saves again at once, as nanoGPT does when it resumes at an evaluation
step.

The model is one ``nn.Linear`` sized so that its parameters and AdamW's two moments come to about
``--mb`` MiB, which is what the save writes. A step is cheap: a batch of four random rows drawn
from the global RNG (saved with the checkpoint, so a resumed run draws the same ones), a squared
error, and AdamW, which touches every parameter and keeps full-size moments. ``--sleep`` slows
each step down until the file ``--gate`` exists (a test creates it once it is done killing the
program).

Every resume and save is appended to ``--log`` as ``<pid> <event>``: ``resume step=<n>`` or
``start fresh``, ``save-begin <path> step=<n>``, ``save-end <path> step=<n>``, ``done``. At the end
``out/result.json`` holds ``{"step", "digest"}``, the digest a SHA-256 of the parameters and the
optimizer state, equal for every run of the same ``--steps`` however often it was interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import torch
from torch import nn

IN_FEATURES = 1024
BATCH = 4
FLOATS_PER_PARAMETER = 3  # the parameter and AdamW's exp_avg and exp_avg_sq
STEP_KEY = "iter_num"  # --step-key


def build(mb: float) -> tuple[nn.Linear, torch.optim.Optimizer]:
    """A Linear whose weights and AdamW moments take about ``mb`` MiB in a checkpoint."""
    floats = mb * 2**20 / 4 / FLOATS_PER_PARAMETER
    out_features = max(1, round(floats / (IN_FEATURES + 1)))
    model = nn.Linear(IN_FEATURES, out_features)
    # The fused kernel: a third of the foreach one's time on this size, and elementwise, so exact.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    return model, optimizer


def train_step(model: nn.Linear, optimizer: torch.optim.Optimizer) -> None:
    """One AdamW step on a fresh random batch: the gradient is dense, so every weight moves."""
    inputs = torch.randn(BATCH, model.in_features)
    targets = torch.randn(BATCH, model.out_features)
    loss = (model(inputs) - targets).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def save(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, log) -> None:
    """The usual one-liner, written over the previous checkpoint."""
    log(f"save-begin {path} step={step}")
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        STEP_KEY: step,
        "rng": torch.get_rng_state(),
    }
    torch.save(state, path)
    log(f"save-end {path} step={step}")


def resume(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, log) -> int:
    """Load ``path`` if it exists; return the step to carry on from."""
    if not os.path.exists(path):
        log("start fresh")
        return 0
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    log(f"resume step={state[STEP_KEY]}")
    return state[STEP_KEY]


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
        print(f"torch_inplace: {event}", flush=True)

    return log


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="total optimizer steps")
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--log", default=None, help="file to append '<pid> <event>' lines to")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds slept per step")
    parser.add_argument("--gate", default=None, help="no more sleeping once this file exists")
    parser.add_argument("--path", default="ckpt.pt", help="the checkpoint file, overwritten")
    parser.add_argument("--mb", type=float, default=100.0, help="checkpoint size in MiB")
    parser.add_argument("--step-key", default=STEP_KEY, help="the checkpoint's key of the step")
    parser.add_argument("--save-on-resume", action="store_true", help="save again on resuming")
    return parser.parse_args()


def main() -> int:
    global STEP_KEY
    args = parse_args()
    STEP_KEY = args.step_key
    log = make_log(args.log)
    # One thread: the sums' order, hence the bits, cannot depend on the machine's load.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, optimizer = build(args.mb)
    step = resume(args.path, model, optimizer, log)
    if step and args.save_on_resume:
        save(args.path, model, optimizer, step, log)
    while step < args.steps:
        if not (args.gate and os.path.exists(args.gate)):
            time.sleep(args.sleep)
        train_step(model, optimizer)
        step += 1
        if step % args.save_every == 0:
            save(args.path, model, optimizer, step, log)
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump({"step": step, "digest": digest(model, optimizer)}, handle)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
