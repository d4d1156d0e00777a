"""A PyTorch Lightning run that checkpoints with ModelCheckpoint and resumes with ckpt_path="last".

    python lightning_ckpt.py --steps 40 --save-every 7 --log PATH [--sleep 0.0] [--gate PATH]
                             [--usual]

The usual Lightning script: a LightningModule (one ``nn.Linear``, AdamW), ``seed_everything(0)``,
``Trainer(max_steps=--steps, deterministic=True, ...)`` with a ``ModelCheckpoint(dirpath=
"checkpoints", every_n_train_steps=--save-every, save_top_k=-1, save_last=True)``, and
``trainer.fit(..., ckpt_path="last")``: Lightning picks the newest ``last*.ckpt`` in
``checkpoints/`` (relative to the working directory) and, when there is none, warns and starts
fresh. Each save writes ``checkpoints/epoch=<e>-step=<s>.ckpt`` and then ``checkpoints/last.ckpt``
over the previous one (Lightning serialises to memory first and then writes the file through an
fsspec transaction: a temporary file moved into place).

Saves may land mid-epoch: the loader is a DataLoader with ``state_dict``/``load_state_dict``
(Lightning's resumable-loader interface), saved in the checkpoint's loop state, so a resumed run
skips the batches the interrupted one had consumed instead of restarting the epoch. Lightning
does not checkpoint the global RNG, so training draws nothing from it.

``--usual`` (or ``$TEST_USUAL=1``) makes it the script most people write instead: a plain
shuffled ``DataLoader`` and Lightning's default logger (``lightning_logs/version_<n>/``:
TensorBoard event files where ``tensorboard`` is installed, else ``metrics.csv``) with the loss
logged every step. A plain loader has no state to save, so a resumed run draws its epoch's order
again from the RNG ``seed_everything`` seeded at start (Lightning checkpoints no RNG), and
gives other batches than an uninterrupted run's epoch would.

``--log``, ``--sleep`` and ``--gate`` default to ``$TEST_LOG``, ``$TEST_SLEEP``, ``$TEST_GATE``,
and ``$TEST_RESULT`` names the result file. Every resume and save is appended to ``--log`` as
``<pid> <event>``: ``resume <file> step=<n>`` or ``start fresh``, ``save-begin <file> step=<n>``
and ``save-end <file> step=<n>`` (once for the ``epoch=...`` file, once for ``last.ckpt``),
``done``. At the end ``out/result.json`` holds ``{"step", "digest"}``, a SHA-256 of the
parameters and the optimizer state.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import warnings

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 8
SAMPLES = 40  # ten batches of four per epoch
BATCH = 4


class ResumableLoader(DataLoader):
    """A DataLoader that knows how far into its epoch it is, so Lightning can resume mid-epoch.

    Lightning fetches no batch ahead from a loader with a length, so when a checkpoint is taken
    in ``on_train_batch_end`` the batches handed out are exactly the ones trained on.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.handed_out = 0
        self.skip = 0

    def __iter__(self):
        skip, self.skip = self.skip, 0
        self.handed_out = skip
        batches = super().__iter__()
        for _ in range(skip):
            next(batches)
        for batch in batches:
            self.handed_out += 1
            yield batch

    def state_dict(self) -> dict:
        # A save on the epoch's last batch resumes into the next epoch, from its start.
        return {"handed_out": self.handed_out % len(self)}

    def load_state_dict(self, state: dict) -> None:
        self.skip = state["handed_out"]


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(FEATURES, FEATURES)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        loss = (self.layer(inputs) - targets).pow(2).mean()
        if self.trainer.logger is not None:
            self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.01)


class Sleep(Callback):
    """--sleep: seconds per step, so a test can slow training down, until --gate exists."""

    def __init__(self, seconds: float, gate: str | None) -> None:
        self.seconds = seconds
        self.gate = gate

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not (self.gate and os.path.exists(self.gate)):
            time.sleep(self.seconds)


class LoggedCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that logs each file's save; on_save_checkpoint would not name the file."""

    def __init__(self, log, **kwargs) -> None:
        super().__init__(**kwargs)
        self.event = log

    def on_train_start(self, trainer, pl_module) -> None:
        # Called after Lightning restored (or did not restore) a checkpoint.
        if trainer.ckpt_path:
            name = os.path.basename(trainer.ckpt_path)
            self.event(f"resume {name} step={trainer.global_step}")
        else:
            self.event("start fresh")
        super().on_train_start(trainer, pl_module)

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        name, step = os.path.basename(filepath), trainer.global_step
        self.event(f"save-begin {name} step={step}")
        super()._save_checkpoint(trainer, filepath)
        self.event(f"save-end {name} step={step}")


def make_loader(usual: bool) -> DataLoader:
    data = torch.Generator().manual_seed(1)
    inputs = torch.randn(SAMPLES, FEATURES, generator=data)
    targets = inputs @ torch.randn(FEATURES, FEATURES, generator=data)
    if usual:
        return DataLoader(TensorDataset(inputs, targets), batch_size=BATCH, shuffle=True)
    return ResumableLoader(TensorDataset(inputs, targets), batch_size=BATCH, shuffle=False)


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
        print(f"lightning_ckpt: {event}", flush=True)

    return log


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="total optimizer steps")
    parser.add_argument("--save-every", type=int, default=7)
    parser.add_argument(
        "--log", default=os.environ.get("TEST_LOG"), help="file to append '<pid> <event>' lines to"
    )
    parser.add_argument(
        "--sleep",
        type=float,
        default=float(os.environ.get("TEST_SLEEP", "0")),
        help="seconds slept per step",
    )
    parser.add_argument(
        "--gate", default=os.environ.get("TEST_GATE"), help="no more sleeping once this file exists"
    )
    parser.add_argument("--usual", action="store_true", help="a shuffled loader, a logger")
    args = parser.parse_args()
    args.usual = args.usual or os.environ.get("TEST_USUAL") == "1"
    return args


def main() -> int:
    args = parse_args()
    log = make_log(args.log)
    torch.set_num_threads(1)  # the bits cannot depend on how many cores there are
    # Lightning's advice to use more loader workers is beside the point for four-row batches.
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    L.seed_everything(0, verbose=False)
    checkpoint = LoggedCheckpoint(
        log,
        dirpath="checkpoints",
        every_n_train_steps=args.save_every,
        save_top_k=-1,
        save_last=True,
    )
    trainer = L.Trainer(
        max_steps=args.steps,
        deterministic=True,
        accelerator="cpu",
        devices=1,
        logger=args.usual,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[checkpoint, Sleep(args.sleep, args.gate)],
    )
    model = Regression()
    trainer.fit(model, train_dataloaders=make_loader(args.usual), ckpt_path="last")
    os.makedirs("out", exist_ok=True)
    with open(os.environ.get("TEST_RESULT") or os.path.join("out", "result.json"), "w") as handle:
        result = digest(model, trainer.optimizers[0])
        json.dump({"step": trainer.global_step, "digest": result}, handle)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
