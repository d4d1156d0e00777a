"""A two-process torch.distributed (gloo, CPU) counter under the directory contract.

Every rank advances the same hash chain, mixed with an all-reduce of the ranks' numbers each
step, so a rank that is missing or out of step shows. Every rank writes ``checkpoint-<step>``
into its own ``$NODUS_CHECKPOINT_DIR`` (with its rank in it), so a test can tell that only node
0's folders became snapshots; each rank resumes from the newest folder laid out for it. Rank 0
writes ``out/result.json`` at the end.

    python ddp_counter.py STEPS SAVE_EVERY SLEEP
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from nodus.testing.counter import SEED, newest_checkpoint


def advance(value: str, step: int, reduced: int) -> str:
    return hashlib.sha256(f"{value}:{step}:{reduced}".encode()).hexdigest()


def expected(steps: int, world: int) -> str:
    value = SEED
    for step in range(1, steps + 1):
        value = advance(value, step, sum(range(1, world + 1)))
    return value


def save(state_dir: str, step: int, value: str, rank: int) -> None:
    """Publish checkpoint-<step> (with the rank that wrote it) by rename."""
    building = os.path.join(state_dir, f".building-{step}")
    os.makedirs(building, exist_ok=True)
    with open(os.path.join(building, "state.json"), "w") as handle:
        json.dump({"step": step, "value": value, "rank": rank}, handle)
    os.rename(building, os.path.join(state_dir, f"checkpoint-{step}"))


def main() -> int:
    steps, save_every, sleep = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    state_dir = os.environ["NODUS_CHECKPOINT_DIR"]
    found = newest_checkpoint(state_dir)
    step, value = found if found else (0, SEED)
    print(f"rank {rank}/{world}: starting at step {step}", flush=True)
    while step < steps:
        step += 1
        total = torch.tensor([rank + 1])
        dist.all_reduce(total)
        value = advance(value, step, int(total.item()))
        if step % save_every == 0:
            save(state_dir, step, value, rank)
        time.sleep(sleep)
    if rank == 0:
        os.makedirs("out", exist_ok=True)
        with open("out/result.json", "w") as handle:
            json.dump({"steps": step, "value": value, "world": world}, handle)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
