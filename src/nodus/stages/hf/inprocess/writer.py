"""Write captured checkpoints in a background thread and publish them by atomic rename.

Training continues while a checkpoint is written (like PyTorch DCP ``async_save`` or Orbax): the
folder is built under ``.nodus/tmp/``, every file is fsynced, the folder is renamed into
``state/`` and only then is the save record written. A crash at any point leaves either no
``checkpoint-<step>`` at all or a complete one, so an incomplete newest checkpoint can never
break a resume. At most one write is in flight; a save that comes due meanwhile waits for it.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from nodus import protocol
from nodus._atomic import fsync_dir
from nodus.stages.hf.inprocess import collation as collations
from nodus.stages.hf.inprocess import identity as identities
from nodus.stages.hf.inprocess.channel import ControlDir
from nodus.stages.hf.inprocess.state_copy import Captured


class CheckpointWriter:
    def __init__(self, control: ControlDir, trainer: Any, on_published: Callable[[int], None]):
        self._control = control
        self._trainer = trainer
        self._on_published = on_published
        self._thread: threading.Thread | None = None

    def submit(self, captured: Captured) -> None:
        """Hand one capture to the background; waits only if the previous write is unfinished."""
        self.wait()
        self._thread = threading.Thread(
            target=self._run, args=(captured,), name=f"nodus-save-{captured.step}", daemon=True
        )
        self._thread.start()

    def busy(self) -> bool:
        """A write is in flight (submitted and not finished yet)."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self, captured: Captured) -> None:
        try:
            self._write(captured)
        except Exception as error:  # a failed save must not kill training; the next one retries
            print(
                f"nodus: checkpoint at step {captured.step} was not saved: {error!r}",
                file=sys.stderr,
            )
            self._control.write_event(
                protocol.EVENT_SAVE_FAILED, {"step": captured.step, "error": repr(error)}
            )

    def _write(self, captured: Captured) -> None:
        name = protocol.checkpoint_folder(captured.step)
        building = os.path.join(
            self._control.tmp_dir(), protocol.building_folder(captured.step, os.getpid())
        )
        shutil.rmtree(building, ignore_errors=True)
        os.makedirs(building)
        try:
            self._write_files(building, captured)
            _fsync_tree(building)
            delay = float(os.environ.get(protocol.ENV_WRITE_DELAY) or 0)
            if delay:
                time.sleep(delay)
            self._publish(building, name)
        finally:
            shutil.rmtree(building, ignore_errors=True)
        self._control.write_save_record(
            protocol.SaveRecord(
                step=captured.step,
                epoch=captured.epoch,
                requests=tuple(captured.requests),
                metrics=captured.metrics,
            )
        )
        self._on_published(captured.step)

    def _write_files(self, folder: str, captured: Captured) -> None:
        """The file set of ``Trainer._save_checkpoint``, so a bare Trainer can resume from it."""
        trainer = self._trainer
        trainer.model.save_pretrained(
            folder,
            state_dict=captured.model_state,
            safe_serialization=trainer.args.save_safetensors,
        )
        if trainer.processing_class is not None:
            trainer.processing_class.save_pretrained(folder)
        with open(os.path.join(folder, "training_args.bin"), "wb") as handle:
            handle.write(captured.training_args)
        torch.save(captured.optimizer_state, os.path.join(folder, "optimizer.pt"))
        torch.save(captured.scheduler_state, os.path.join(folder, "scheduler.pt"))
        states = captured.rng_states
        for rank, state in enumerate(states):
            name = "rng_state.pth" if len(states) == 1 else f"rng_state_{rank}.pth"
            torch.save(state, os.path.join(folder, name))
        if captured.scaler_state is not None:
            torch.save(captured.scaler_state, os.path.join(folder, "scaler.pt"))
        with open(os.path.join(folder, "trainer_state.json"), "w", encoding="utf-8") as handle:
            handle.write(captured.trainer_state_json)
        identities.write(folder, captured.identity)
        if captured.collation is not None:
            collations.write(folder, captured.collation)

    def _publish(self, building: str, name: str) -> None:
        state_dir = self._control.state_dir
        os.makedirs(state_dir, exist_ok=True)
        target = os.path.join(state_dir, name)
        if os.path.exists(target):  # the same step saved again (a request at a restored step)
            shutil.rmtree(target)
        os.rename(building, target)
        fsync_dir(state_dir)


def remove_older_checkpoints(state_dir: str, committed_step: int) -> None:
    """Remove local checkpoint folders older than the newest committed snapshot."""
    for step in protocol.checkpoint_steps(state_dir):
        if step < committed_step:
            folder = os.path.join(state_dir, protocol.checkpoint_folder(step))
            shutil.rmtree(folder, ignore_errors=True)


def _fsync_tree(folder: str) -> None:
    for name in os.listdir(folder):
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(folder)
