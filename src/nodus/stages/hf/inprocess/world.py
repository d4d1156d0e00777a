"""The processes training together (``torchrun``, ``accelerate launch``), as a session sees them.

In a world of several processes every rank runs the same Trainer and reaches the same optimizer
boundaries, but what decides a save is known to one process only: the auto cadence's timing, the
runner's requests and its disk guard are read by rank 0. Rank 0 decides at each boundary and its
decision reaches every rank through a collective, so all ranks save at the same step (and stop
together on a pause or a preemption notice). At a save every rank's RNG state is gathered to
rank 0, which alone writes the checkpoint: the model, optimizer and scheduler are the same on
every rank under DDP, and the RNG states are each rank's own (``rng_state_<rank>.pth``, as the
Trainer writes them for ``process_index``).

The collectives run on a process group of their own with the gloo backend, created when the
session is (every rank builds its Trainer, so every rank creates it): they need no device and
work the same whatever backend trains (NCCL on GPUs). A world of one has no group and no
collective; :class:`World` then answers as that one process.

On the CPU the Trainer of a world of several processes cannot resume at all in Transformers
4.57: its ``args.device`` is ``cpu:0`` on every rank, it loads the optimizer state with
``map_location=args.device``, and torch has no deserializer for the location ``cpu:0``
("don't know how to restore data location"). :func:`indexed_cpu_loads` registers one that
puts such a storage on the CPU, which is what ``cpu:0`` names.
"""

from __future__ import annotations

import contextlib
from typing import Any

_INDEXED_CPU_REGISTERED = False


class World:
    def __init__(self) -> None:
        self.size = 1
        self.rank = 0
        self._group: Any = None
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self.size = dist.get_world_size()
            self.rank = dist.get_rank()
            self._group = dist.new_group(backend="gloo")

    @property
    def leader(self) -> bool:
        """Rank 0: it decides, writes checkpoints, save records and events."""
        return self.rank == 0

    def agree(self, save: bool, stop: bool) -> tuple[bool, bool]:
        """Rank 0's decision at this boundary, on every rank (the others' arguments are
        ignored)."""
        if self._group is None:
            return save, stop
        import torch
        import torch.distributed as dist

        decision = torch.tensor([int(save), int(stop)], dtype=torch.int64)
        dist.broadcast(decision, src=0, group=self._group)
        return bool(decision[0]), bool(decision[1])

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's ``value`` in rank order on rank 0 (None on the others)."""
        if self._group is None:
            return [value]
        import torch.distributed as dist

        gathered: list[Any] | None = [None] * self.size if self.leader else None
        dist.gather_object(value, gathered, dst=0, group=self._group)
        return gathered

    def await_leaders_end(self) -> None:
        """A follower after a stop save: wait until rank 0's process has ended.

        Rank 0 blocks once its save is recorded and the runner ends it; on one machine the
        runner ends the whole world at once, but a world over the nodes of a multi-node stage has
        a program on each node, and a follower's node never signals its own (a signal could
        land in the middle of rank 0's collective save). So the follower waits in a collective
        rank 0 never joins: it fails when rank 0's connections close, and the follower's program
        then ends with its world."""
        if self._group is None:
            return
        import torch.distributed as dist

        with contextlib.suppress(Exception):  # rank 0 gone (or the group's timeout passed)
            dist.barrier(group=self._group)


def indexed_cpu_loads() -> None:
    """Let ``torch.load(..., map_location=torch.device("cpu", N))`` load (onto the CPU)."""
    global _INDEXED_CPU_REGISTERED
    if _INDEXED_CPU_REGISTERED:
        return
    from torch import serialization

    def tagger(_storage: Any) -> None:
        return None  # saving is unchanged: CPU storages stay tagged "cpu"

    def deserializer(storage: Any, location: str) -> Any:
        prefix, _, index = location.partition(":")
        return storage if prefix == "cpu" and index.isdigit() else None

    serialization.register_package(11, tagger, deserializer)
    _INDEXED_CPU_REGISTERED = True
