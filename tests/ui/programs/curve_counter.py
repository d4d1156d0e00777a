"""The counter of the runner's tests, with a loss curve: a directory-contract program whose
every checkpoint folder also holds a ``trainer_state.json`` (the Trainer's file) with a
``log_history`` of each step's loss and learning rate, so ``nodus ui`` draws curves.

    python curve_counter.py --steps 40 --save-every 5 --sleep 0.05 [--fail-at 12] [--hold PATH]

Loss and learning rate are functions of the step alone, so an attempt that resumed logs the
same history the interrupted one did. Its first line has HTML in it: a page must show it as text.
After each save it waits while the file ``--hold`` exists: a test looks at a page of a run that
is surely still going, then lets it go on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import tempfile
import time

from nodus import protocol
from nodus.protocol import checkpoint_folder

HTML_LINE = "<b>bold</b><script>document.title='pwned'</script> & <i>done</i>"


def loss(step: int) -> float:
    shift = float(os.environ.get("CURVE_SHIFT", "0"))  # a branch may set another curve
    return round(2.5 * math.exp(-step / 15) + 0.1 + shift + 0.05 * math.sin(step), 6)


def learning_rate(step: int, steps: int) -> float:
    return round(1e-3 * (1 - step / (steps + 1)), 8)


def save(state_dir: str, step: int, steps: int) -> None:
    building = tempfile.mkdtemp(prefix=f"{checkpoint_folder(step)}-")
    history = [
        {"step": s, "loss": loss(s), "learning_rate": learning_rate(s, steps)}
        for s in range(1, step + 1)
    ]
    with open(os.path.join(building, "state.json"), "w") as handle:
        json.dump({"step": step}, handle)
    with open(os.path.join(building, "trainer_state.json"), "w") as handle:
        json.dump({"global_step": step, "log_history": history}, handle)
    with open(os.path.join(building, "model.safetensors"), "wb") as handle:
        handle.write(_weights(step))
    os.rename(building, os.path.join(state_dir, checkpoint_folder(step)))


def _weights(step: int) -> bytes:
    """A whole safetensors file of one tensor (two floats): the run's "model" at ``step``."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + struct.pack("<2f", step, loss(step))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--fail-at", type=int, default=None)
    parser.add_argument("--hold", default=None)
    args = parser.parse_args()
    state_dir = os.environ.get(protocol.ENV_CHECKPOINT_DIR, protocol.STATE_DIR)
    os.makedirs(state_dir, exist_ok=True)
    steps = protocol.checkpoint_steps(state_dir)
    step = steps[-1] if steps else 0
    print(f"curve: starting at step {step}", flush=True)
    print(HTML_LINE, flush=True)
    while step < args.steps:
        time.sleep(args.sleep)
        step += 1
        if args.fail_at == step:
            print(f"curve: failing at step {step}: loss is NaN <as asked>", flush=True)
            return 1
        if step % args.save_every == 0:
            save(state_dir, step, args.steps)
            print(f"curve: step {step}, loss {loss(step):.4f}, saved", flush=True)
            print(HTML_LINE, flush=True)  # again, for a page that follows the output live
            while args.hold and os.path.exists(args.hold):
                time.sleep(0.05)
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump({"steps": step}, handle)
    print(f"curve: done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
