"""Copy everything a checkpoint holds into memory at an optimizer boundary.

This is the only part of a save that stalls training: after it returns the background writer
works from these copies while the Trainer keeps changing its own tensors. Everything is taken at
the same instant the Trainer's own ``_save_checkpoint`` would take it (after the step's logging),
so the files are those a bare Trainer would have written at that step, RNG states included.
"""

from __future__ import annotations

import copy
import io
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nodus.stages.hf.inprocess.state_json import StateJson


@dataclass
class Captured:
    """One checkpoint, in memory, ready to be written without touching the live Trainer."""

    step: int
    epoch: float
    model_state: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    scheduler_state: dict[str, Any]
    rng_states: list[dict[str, Any]]
    """Every rank's RNG state in rank order: ``rng_state.pth`` for a world of one, else
    ``rng_state_<rank>.pth`` each (as ``Trainer._save_rng_state`` names them)."""
    trainer_state_json: str
    training_args: bytes  # torch.save(args), pickled now so later changes cannot leak in
    identity: dict[str, Any]
    metrics: dict[str, float]
    requests: list[int]
    collation: dict[str, Any] | None = None  # a masking collator's pending batches (.collation)
    scaler_state: dict[str, Any] | None = None
    """fp16's GradScaler (Accelerate's ``accelerator.scaler``): the Trainer's ``scaler.pt``."""


class Buffers:
    """CPU tensors reused from one save to the next.

    Copying into memory that is already mapped is several times faster than allocating fresh
    tensors (no page faults), and this copy is the whole training stall. A buffer is reused only
    after the previous write has finished (the writer is waited on before a capture).
    """

    def __init__(self) -> None:
        self._tensors: dict[str, torch.Tensor] = {}
        self.saved_names: set[str] | None = None
        """A PEFT model's: the names of the model state its ``save_pretrained`` writes (worked
        out at the first save; the model's structure does not change while it trains)."""
        self.names_known = False

    def copy(self, key: str, tensor: torch.Tensor) -> torch.Tensor:
        held = self._tensors.get(key)
        if held is None or held.shape != tensor.shape or held.dtype != tensor.dtype:
            held = self._tensors[key] = torch.empty_like(tensor, device="cpu")
        held.copy_(tensor.detach())
        return held


def capture(
    trainer: Any,
    identity: dict[str, Any],
    requests: list[int],
    buffers: Buffers | None = None,
    state_json: StateJson | None = None,
    rng_states: list[dict[str, Any]] | None = None,
) -> Captured:
    """The checkpoint of this boundary; ``buffers`` and ``state_json`` are kept from one save
    to the next by the session (fresh ones for a single save).

    The caller has called ``trainer.store_flos()`` first, as the Trainer does before it saves
    (in a world of several processes every rank calls it: it is a collective there).
    ``rng_states``: every rank's :func:`rng_state`, in rank order (this process's alone when
    None)."""
    buffers = buffers or Buffers()
    state_json = state_json or StateJson()
    state = trainer.state
    _export_callback_states(trainer)
    return Captured(
        step=state.global_step,
        epoch=float(state.epoch or 0.0),
        model_state=_clone_tensors(_saved_state(trainer.model, buffers), buffers),
        optimizer_state=_clone_tree(trainer.optimizer.state_dict(), buffers, "optimizer"),
        scheduler_state=copy.deepcopy(trainer.lr_scheduler.state_dict()),
        rng_states=rng_states or [rng_state(trainer.args)],
        trainer_state_json=state_json.text(state),
        training_args=_pickled(trainer.args),
        identity=identity,
        metrics=step_metrics(state),
        requests=list(requests),
        scaler_state=_scaler_state(trainer),
    )


def _scaler_state(trainer: Any) -> dict[str, Any] | None:
    """What ``Trainer._save_scaler`` saves: the loss scale and its growth tracker (fp16 on an
    accelerator); None where there is no GradScaler (float32, bf16, the CPU)."""
    scaler = getattr(getattr(trainer, "accelerator", None), "scaler", None)
    return None if scaler is None else copy.deepcopy(scaler.state_dict())


def step_metrics(state: Any) -> dict[str, float]:
    """Loss, learning rate, epoch and grad norm logged at this step (merged log entries)."""
    metrics: dict[str, float] = {"epoch": float(state.epoch or 0.0)}
    for entry in _entries_of_step(state.log_history, state.global_step):
        metrics.update(
            {k: v for k, v in entry.items() if k != "step" and isinstance(v, (int, float))}
        )
    return metrics


def _entries_of_step(history: list[dict], step: int) -> list[dict]:
    """The log entries of ``step``, oldest first: the history is in step order, so it is read
    from its end back (its length grows with the run; a save must not)."""
    found = []
    for entry in reversed(history):
        logged = entry.get("step")
        if isinstance(logged, int) and logged < step:
            break
        if logged == step:
            found.append(entry)
    return found[::-1]


def _saved_state(model: Any, buffers: Buffers) -> dict[str, torch.Tensor]:
    """The model state its checkpoint holds: all of it, or for a PEFT model only the tensors
    its ``save_pretrained`` writes (the adapters), as ``Trainer._save_checkpoint`` saves it. The
    frozen base model is not copied at every save: for a big base that would be the whole stall.
    """
    state = model.state_dict()
    if not buffers.names_known:
        buffers.saved_names = _peft_saved_names(model, state)
        buffers.names_known = True
    if buffers.saved_names is None:
        return state
    return {name: state[name] for name in buffers.saved_names}


def _peft_saved_names(model: Any, state: dict[str, torch.Tensor]) -> set[str] | None:
    """Which entries of ``state`` PEFT's ``save_pretrained(state_dict=state)`` writes, found by
    asking PEFT itself (``get_peft_model_state_dict`` for each adapter) and matching the tensors
    it returns to ``state``'s own; None (copy all of it) for a model that is not a PEFT model,
    or when any returned tensor is not one of ``state``'s."""
    configs = getattr(model, "peft_config", None)
    if not configs or type(model).__module__.split(".")[0] != "peft":
        return None
    from peft.utils import get_peft_model_state_dict

    by_id = {id(tensor): name for name, tensor in state.items()}
    names: set[str] = set()
    for adapter in configs:
        chosen = get_peft_model_state_dict(model, state_dict=state, adapter_name=adapter)
        for tensor in chosen.values():
            if id(tensor) not in by_id:
                return None  # PEFT made a tensor of its own: keep the whole state
            names.add(by_id[id(tensor)])
    return names


def _clone_tensors(state: dict[str, torch.Tensor], buffers: Buffers) -> dict[str, torch.Tensor]:
    """Copy to CPU memory, keeping tied weights tied (one copy per storage, as the model has)."""
    by_storage: dict[tuple, torch.Tensor] = {}
    cloned = {}
    for name, tensor in state.items():
        key = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tuple(tensor.stride()),
            tensor.dtype,
        )
        if key not in by_storage:
            by_storage[key] = buffers.copy(f"model/{name}", tensor)
        cloned[name] = by_storage[key]
    return cloned


def _clone_tree(value: Any, buffers: Buffers, path: str) -> Any:
    if isinstance(value, torch.Tensor):
        return buffers.copy(path, value)
    if isinstance(value, dict):
        return {k: _clone_tree(v, buffers, f"{path}/{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_clone_tree(v, buffers, f"{path}/{i}") for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    return copy.deepcopy(value)


def rng_state(args: Any) -> dict[str, Any]:
    """The same dictionary ``Trainer._save_rng_state`` writes for one process.

    Under a launcher's world of one (``torchrun --nproc_per_node 1``) the Trainer runs in
    ``ParallelMode.DISTRIBUTED`` and saves, and on resume sets, the CUDA states of all devices
    (``get_rng_state_all``); a single state there would not be restored.
    """
    from transformers.training_args import ParallelMode

    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "cpu": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        cuda = torch.cuda.random
        distributed = args.parallel_mode == ParallelMode.DISTRIBUTED
        states["cuda"] = cuda.get_rng_state_all() if distributed else cuda.get_rng_state()
    return states


def _export_callback_states(trainer: Any) -> None:
    """What ``_save_checkpoint`` does with stateful callbacks before writing trainer_state.json."""
    from transformers.trainer_callback import ExportableState

    for cb in [*trainer.callback_handler.callbacks, trainer.control]:
        if not isinstance(cb, ExportableState):
            continue
        name = cb.__class__.__name__
        if isinstance(trainer.state.stateful_callbacks.get(name), list):
            trainer.state.stateful_callbacks[name].append(cb.state())
        else:
            trainer.state.stateful_callbacks[name] = cb.state()


def _pickled(args: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(args, buffer)
    return buffer.getvalue()
