"""A directory-contract program that logs its loss the way people do outside the Trainer.

    python logging_counter.py --steps 30 --save-every 5 --logger tensorboard|csv|jsonl
                              [--sleep 0.05 --gate PATH] [--log-to PATH]

Every step it logs ``loss`` (a function of the step alone, so a resumed attempt logs what the
interrupted one did) with one of three loggers, each writing where it does by default:

- ``tensorboard``: torch's ``SummaryWriter()`` (``runs/<date>_<host>/events.out.tfevents.*``);
- ``csv``: Lightning's ``CSVLogger`` file shape (``lightning_logs/version_0/metrics.csv``:
  ``epoch,loss,step,val_loss``, a validation row every save with ``loss`` left blank);
- ``jsonl``: ``metrics.jsonl``, one ``{"step": N, "loss": …}`` line a step.

``--log-to`` writes elsewhere: the JSON lines file, or ``SummaryWriter``'s folder.

Every ``--save-every`` steps it flushes its logger, then publishes
``state/checkpoint-<step>/ckpt.pt`` (``torch.save`` into a temporary folder, then a rename) and
keeps the newest two. On start it resumes from the newest one in ``state/``. ``--sleep`` slows
each step down until the file ``--gate`` exists. At the end ``out/result.json`` holds the step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

import torch

from nodus import protocol


def loss(step: int) -> float:
    return round(2.0 * math.exp(-step / 10) + 0.25, 6)


class Jsonl:
    def __init__(self, place: str | None) -> None:
        path = place or "metrics.jsonl"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.file = open(path, "a")  # noqa: SIM115

    def log(self, step: int, values: dict) -> None:
        self.file.write(json.dumps({"step": step, **values}) + "\n")

    def flush(self) -> None:
        self.file.flush()


class Csv:
    """Lightning's CSVLogger's file: one header, a row per log call, blanks where not logged."""

    COLUMNS = ("epoch", "loss", "step", "val_loss")

    def __init__(self, place: str | None) -> None:
        folder = place or os.path.join("lightning_logs", "version_0")
        os.makedirs(folder, exist_ok=True)
        self.file = open(os.path.join(folder, "metrics.csv"), "a")  # noqa: SIM115
        if self.file.tell() == 0:
            self.file.write(",".join(self.COLUMNS) + "\n")

    def log(self, step: int, values: dict) -> None:
        row = {"epoch": 0, "step": step, **values}
        self.file.write(",".join(str(row.get(c, "")) for c in self.COLUMNS) + "\n")

    def flush(self) -> None:
        self.file.flush()


class Board:
    def __init__(self, place: str | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(place)

    def log(self, step: int, values: dict) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def flush(self) -> None:
        self.writer.flush()


LOGGERS = {"jsonl": Jsonl, "csv": Csv, "tensorboard": Board}


def save(state_dir: str, step: int) -> None:
    building = tempfile.mkdtemp(prefix="building-", dir=os.path.dirname(os.path.abspath(state_dir)))
    torch.save(
        {"step": step, "w": torch.full((4,), float(step))}, os.path.join(building, "ckpt.pt")
    )
    os.rename(building, os.path.join(state_dir, protocol.checkpoint_folder(step)))
    for old in protocol.checkpoint_steps(state_dir)[:-2]:
        shutil.rmtree(os.path.join(state_dir, protocol.checkpoint_folder(old)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--logger", choices=sorted(LOGGERS), required=True)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--gate", default=None)
    parser.add_argument("--log-to", default=None)
    args = parser.parse_args()
    state_dir = os.environ.get(protocol.ENV_CHECKPOINT_DIR, protocol.STATE_DIR)
    os.makedirs(state_dir, exist_ok=True)
    steps = protocol.checkpoint_steps(state_dir)
    step = 0
    if steps:
        folder = os.path.join(state_dir, protocol.checkpoint_folder(steps[-1]))
        step = torch.load(os.path.join(folder, "ckpt.pt"))["step"]
    print(f"logging_counter: pid {os.getpid()} starting at step {step}", flush=True)
    logger = LOGGERS[args.logger](args.log_to)
    while step < args.steps:
        if args.sleep and not (args.gate and os.path.exists(args.gate)):
            time.sleep(args.sleep)
        step += 1
        logger.log(step, {"loss": loss(step)})
        if step % args.save_every == 0:
            if args.logger == "csv":
                logger.log(step, {"val_loss": loss(step) + 0.5})
            logger.flush()
            save(state_dir, step)
    logger.flush()
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump({"step": step}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
