"""A tiny deterministic stage program that follows the directory contract.

    python -m nodus.testing.counter --steps 100 --save-every 10 [--sleep 0.01]

Its state is a hash chain: ``value(n) = sha256(value(n-1) + n)``, so the value after N steps is
the same however often the program was killed and resumed, and any lost or repeated step shows.
Every ``--save-every`` steps it writes ``checkpoint-<step>/state.json`` into
``$NODUS_CHECKPOINT_DIR`` by atomic rename (built in ``$TMPDIR``, same filesystem), keeps the
newest ``--keep`` folders, and on start resumes from the newest one. At the end it writes
``--result`` (default ``out/result.json``) with the step count and the final value.

Use :func:`expected_value` in a test to know what an uninterrupted run ends with.

With ``NODUS_WARM_START=1`` (a run branched ``--from weights``) the newest checkpoint folder is
another run's: its value is taken as the starting "weights" and counting starts again at step 0,
so the run ends with ``expected_value(steps, start=<that value>)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time

from nodus import protocol
from nodus.protocol import checkpoint_folder

SEED = "nodus-counter"


def advance(value: str, step: int) -> str:
    """One training step: the next link of the hash chain."""
    return hashlib.sha256(f"{value}:{step}".encode()).hexdigest()


def expected_value(steps: int, start: str = SEED) -> str:
    """The value an uninterrupted run of ``steps`` steps ends with (from ``start``)."""
    value = start
    for step in range(1, steps + 1):
        value = advance(value, step)
    return value


def newest_checkpoint(state_dir: str) -> tuple[int, str] | None:
    """(step, value) of the newest readable checkpoint folder, or None to start fresh."""
    for step in reversed(protocol.checkpoint_steps(state_dir)):
        try:
            with open(os.path.join(state_dir, checkpoint_folder(step), "state.json")) as handle:
                data = json.load(handle)
            return int(data["step"]), str(data["value"])
        except (OSError, ValueError, KeyError):
            continue  # a damaged folder: fall back to the one before it
    return None


def save(state_dir: str, step: int, value: str, keep: int, state_bytes: int = 0) -> None:
    """Publish checkpoint-<step> by rename so nobody ever sees it half written."""
    building = tempfile.mkdtemp(prefix=f"{checkpoint_folder(step)}-")
    with open(os.path.join(building, "state.json"), "w") as handle:
        json.dump({"step": step, "value": value}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    if state_bytes:  # stands in for model and optimizer tensors: different at every step
        block = hashlib.sha256(value.encode()).digest() * (1 << 15)
        with open(os.path.join(building, "weights.bin"), "wb") as handle:
            for start in range(0, state_bytes, len(block)):
                handle.write(block[: min(len(block), state_bytes - start)])
            handle.flush()
            os.fsync(handle.fileno())
    target = os.path.join(state_dir, checkpoint_folder(step))
    if os.path.exists(target):
        shutil.rmtree(target)
    try:
        os.rename(building, target)
    except OSError:  # $TMPDIR on another filesystem: stage next to the target instead
        staged = os.path.join(state_dir, f".{checkpoint_folder(step)}.tmp")
        shutil.move(building, staged)
        os.rename(staged, target)
    _prune(state_dir, keep)


def _prune(state_dir: str, keep: int) -> None:
    steps = protocol.checkpoint_steps(state_dir)
    for step in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(os.path.join(state_dir, checkpoint_folder(step)), ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nodus.testing.counter", description=__doc__)
    parser.add_argument("--steps", type=int, required=True, help="steps to run in total")
    parser.add_argument("--save-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step")
    # nodus captures a folder once it has been still for its settle time; a folder pruned
    # sooner is never captured, so keep enough of them to outlive it at fast save rates.
    parser.add_argument("--keep", type=int, default=8, help="checkpoint folders to keep")
    parser.add_argument(
        "--state-bytes",
        type=int,
        default=0,
        help="size of a weights.bin written with each checkpoint",
    )
    parser.add_argument("--result", default=os.path.join("out", "result.json"))
    parser.add_argument(
        "--clock", action="store_true", help="end the first line with the monotonic clock"
    )
    parser.add_argument("--fail-at", type=int, default=None, help="exit 1 at this step")
    parser.add_argument(
        "--save-on-term", action="store_true", help="on SIGTERM save the current step, then exit"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state_dir = os.environ.get(protocol.ENV_CHECKPOINT_DIR, protocol.STATE_DIR)
    os.makedirs(state_dir, exist_ok=True)
    step, value = newest_checkpoint(state_dir) or (0, SEED)
    if os.environ.get(protocol.ENV_WARM_START) == "1" and step:
        print(f"counter: warm start from the weights of {checkpoint_folder(step)}", flush=True)
        step = 0  # the value is kept: fresh "optimizer", same "weights"
    # Which interpreter ran it, so a test can tell the venv's python from another one.
    # `--clock`: when it printed this, on the clock every process shares (for benchmarks).
    clock = f" at {time.monotonic():.6f}" if args.clock else ""
    print(f"counter: starting at step {step} (python {sys.executable}){clock}", flush=True)
    stop = []
    if args.save_on_term:
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while step < args.steps and not stop:
        time.sleep(args.sleep)
        step += 1
        value = advance(value, step)
        if args.fail_at == step:
            print(f"counter: failing at step {step} as asked", flush=True)
            return 1
        if args.save_every and step % args.save_every == 0:
            save(state_dir, step, value, args.keep, args.state_bytes)
            print(f"counter: saved {checkpoint_folder(step)}", flush=True)
    if stop:
        save(state_dir, step, value, args.keep, args.state_bytes)
        print(f"counter: stopped by SIGTERM, saved {checkpoint_folder(step)}", flush=True)
        return 143
    os.makedirs(os.path.dirname(args.result) or ".", exist_ok=True)
    with open(args.result, "w") as handle:
        json.dump({"steps": step, "value": value}, handle)
    print(f"counter: done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
