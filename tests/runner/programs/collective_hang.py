"""A world of two (torchrun, gloo) whose rank 1 stops before a collective in attempt 1.

    torchrun --standalone --nproc_per_node 2 collective_hang.py STEPS SAVE_EVERY HANG_AT

Both ranks all-reduce once per step; rank 0 advances the shipped counter's value and publishes
``state/checkpoint-<step>`` every ``SAVE_EVERY`` steps. In attempt 1, rank 1 stops after step
``HANG_AT`` (a sleep that never ends) and rank 0 blocks in the next all-reduce: the world hangs
without a word. Every later attempt resumes from the newest checkpoint and runs to ``STEPS``;
rank 0 writes ``out/result.json`` as the counter does.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from nodus import protocol
from nodus.testing import counter


def main() -> int:
    steps, save_every, hang_at = (int(word) for word in sys.argv[1:4])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    state_dir = os.environ.get(protocol.ENV_CHECKPOINT_DIR, protocol.STATE_DIR)
    os.makedirs(state_dir, exist_ok=True)
    step, value = counter.newest_checkpoint(state_dir) or (0, counter.SEED)
    first = os.environ.get(protocol.ENV_ATTEMPT) == "1"
    print(f"rank {rank}: starting at step {step}", flush=True)
    while step < steps:
        total = torch.ones(1)
        dist.all_reduce(total)  # rank 0 blocks here once rank 1 has stopped
        step += 1
        if rank == 0:
            value = counter.advance(value, step)
            if step % save_every == 0:
                counter.save(state_dir, step, value, keep=8)
                print(f"rank 0: saved step {step}", flush=True)
        if first and rank == 1 and step == hang_at:
            print("rank 1: stopping before the next collective", flush=True)
            while True:
                time.sleep(3600)
        time.sleep(0.02)
    if rank == 0:
        os.makedirs("out", exist_ok=True)
        with open(os.path.join("out", "result.json"), "w") as handle:
            json.dump({"steps": step, "value": value}, handle)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
