"""A capturing process for the crash test: saves checkpoints and captures them until killed.

Every file's contents derive from (path, step), so the test can tell a snapshot that holds one
real state of each file from a torn or mixed one. Usage: crash_child.py STORE LIVE FIRST_STEP
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys

from nodus.store import SnapshotInfo, _direct, _io, open_store

FILES = {"model.safetensors": 96 * 1024, "optimizer.pt": 160 * 1024, "trainer_state.json": 300}

# The two large files take the direct-write path (in 32 KiB chunks), as multi-GiB checkpoint
# files do with the real sizes, so kills also land in the middle of direct writes.
DIRECT_MIN_BYTES = 64 * 1024
DIRECT_CHUNK_BYTES = 32 * 1024


def contents(name: str, step: int) -> bytes:
    """Deterministic bytes for ``name`` at ``step`` (the test regenerates them to compare)."""
    seed = hashlib.sha256(f"{name}:{step}".encode()).digest()
    return (seed * (FILES[name] // len(seed) + 1))[: FILES[name]]


def save(live: str, step: int) -> None:
    """Publish state/checkpoint-<step> by rename, like the integration; drop older ones."""
    state = os.path.join(live, "state")
    temp = os.path.join(live, ".nodus", "tmp", f"checkpoint-{step}")
    os.makedirs(temp, exist_ok=True)
    for name in FILES:
        with open(os.path.join(temp, name), "wb") as handle:
            handle.write(contents(name, step))
    os.makedirs(state, exist_ok=True)
    os.rename(temp, os.path.join(state, f"checkpoint-{step}"))
    for old in os.listdir(state):
        if old != f"checkpoint-{step}":
            shutil.rmtree(os.path.join(state, old), ignore_errors=True)


def main() -> None:
    store_url, live, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
    _io.STORE_DIRECT_MIN_BYTES = DIRECT_MIN_BYTES
    _direct.STORE_DIRECT_CHUNK_BYTES = DIRECT_CHUNK_BYTES
    store = open_store(store_url)
    print("ready", flush=True)
    step = first
    while True:
        save(live, step)
        store.capture(
            live,
            ["state"],
            info=SnapshotInfo(run="run_crash", stage="main", attempt=first, step=step),
        )
        print("committed", step, flush=True)
        step += 1


if __name__ == "__main__":
    main()
