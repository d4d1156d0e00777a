"""A directory-contract program that writes its checkpoint folders in place, the Trainer's way.

    python inplace_writer.py --steps 40 --save-every 10 --pause 1.6 [--layout trainer|custom]
                             [--hold-at STEP --gate PATH]

The Transformers Trainer writes ``checkpoint-<step>`` straight into its output folder: the model
first, then optimizer, scheduler and RNG state, ``trainer_state.json`` last. A big model's
optimizer gather leaves the folder holding only the weights for a while; ``--pause`` stands in
for it. ``--layout custom`` writes a layout nodus cannot know (``weights.bin``, ``optim.bin``,
``progress.json``, then a ``COMPLETE`` marker) for the ``checkpoint_complete`` setting.
With ``--hold-at STEP --gate PATH`` the save of ``checkpoint-STEP`` stays in its pause until
``PATH`` exists: a test kills the program there, then creates ``PATH`` so that a resumed
attempt saves that step again without waiting.

Training is three hash chains (weights, optimizer moments, RNG) advanced every step, so the
final state is the same however often the program was interrupted, as long as each resume
found all three and the step. It resumes the way the Trainer does: from the highest-numbered
checkpoint folder, loading whatever it finds there; a missing optimizer or RNG file starts that
chain afresh and a missing trainer state restarts the step count, which shows in the result.

Every save and resume is also appended to ``--log`` (a file outside the working copy) so a test
can time a kill and see what each attempt resumed from.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import struct
import sys
import time
import zipfile

FILES = {
    "trainer": ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"),
    "custom": ("weights.bin", "optim.bin", "sched.bin", "rng.bin"),
}
LAST = {"trainer": "trainer_state.json", "custom": "COMPLETE"}
AROUND_WEIGHTS = {"trainer": ("config.json", "training_args.bin"), "custom": ()}
"""Written with the weights, before the pause: the Trainer's save_model writes the model's
config first and its training arguments right after the weights."""
SEEDS = ("weights", "moments", "rng")


def advance(state: tuple[str, str, str], step: int) -> tuple[str, str, str]:
    """One training step of the three chains."""
    weights, moments, rng = state
    moments = _hash(moments, step)
    rng = _hash(rng, step)
    return _hash(weights, moments, rng, step), moments, rng


def expected(steps: int) -> dict:
    """What an uninterrupted run of ``steps`` steps ends with."""
    state = SEEDS
    for step in range(1, steps + 1):
        state = advance(state, step)
    return {"step": steps, "state": list(state)}


def _hash(*parts: object) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def save(folder: str, layout: str, step: int, state: tuple, pause: float, log, gate=None) -> None:
    """Write the folder in place: weights, (pause, and the gate), the rest, the last file last."""
    os.makedirs(folder, exist_ok=True)
    weights, optimizer, scheduler, rng = FILES[layout]
    if layout == "trainer":  # the Trainer's save_model: config, weights, then its arguments
        _write(os.path.join(folder, "config.json"), "{}")
    _write(os.path.join(folder, weights), state[0])
    if layout == "trainer":
        _write(os.path.join(folder, "training_args.bin"), "args")
    log(f"weights {os.path.basename(folder)}")
    time.sleep(pause)
    while gate is not None and not os.path.exists(gate):
        time.sleep(0.02)
    _write(os.path.join(folder, optimizer), state[1])
    _write(os.path.join(folder, scheduler), str(step))
    _write(os.path.join(folder, rng), state[2])
    _write(os.path.join(folder, LAST[layout]), json.dumps({"global_step": step}))
    log(f"saved {os.path.basename(folder)}")


def resume(state_dir: str, layout: str, log) -> tuple[int, tuple]:
    """The Trainer's resume: the highest-numbered folder, whatever it holds."""
    steps = sorted(
        int(name.split("-", 1)[1])
        for name in os.listdir(state_dir)
        if name.startswith("checkpoint-") and name.split("-", 1)[1].isdigit()
    )
    if not steps:
        log("start fresh")
        return 0, SEEDS
    folder = os.path.join(state_dir, f"checkpoint-{steps[-1]}")
    names = FILES[layout]
    found = [_read(os.path.join(folder, name)) for name in (*names, LAST[layout])]
    weights, moments, _schedule, rng, last = found
    step = json.loads(last)["global_step"] if last is not None else 0
    missing = [name for name, value in zip((*names, LAST[layout]), found) if value is None]
    log(f"resume checkpoint-{steps[-1]} missing={','.join(missing) or '-'}")
    return step, (weights or SEEDS[0], moments or SEEDS[1], rng or SEEDS[2])


def _write(path: str, text: str) -> None:
    """The text in the file's format, whole (tests/whole_files.py writes the same way)."""
    with open(path, "wb") as handle:
        handle.write(_encode(os.path.basename(path), text))
        handle.flush()
        os.fsync(handle.fileno())


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return _decode(os.path.basename(path), handle.read())
    except FileNotFoundError:
        return None


def _encode(name: str, text: str) -> bytes:
    if name.endswith(".safetensors"):  # a header with no tensors, the text as metadata
        header = json.dumps({"__metadata__": {"text": text}}).encode()
        return struct.pack("<Q", len(header)) + header
    if name.endswith(_ZIPPED):  # what torch.save writes: a zip archive
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("archive/data.txt", text)
        return buffer.getvalue()
    return text.encode()


def _decode(name: str, data: bytes) -> str:
    if name.endswith(".safetensors"):
        (length,) = struct.unpack("<Q", data[:8])
        return json.loads(data[8 : 8 + length])["__metadata__"]["text"]
    if name.endswith(_ZIPPED):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.read("archive/data.txt").decode()
    return data.decode()


_ZIPPED = (".pt", ".pth", ".bin", ".ckpt", ".pkl")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.02, help="seconds per step")
    parser.add_argument("--pause", type=float, default=1.6, help="seconds after the weights")
    parser.add_argument("--layout", choices=sorted(FILES), default="trainer")
    parser.add_argument("--log", required=True)
    parser.add_argument("--hold-at", type=int, default=None, help="the save held at the gate")
    parser.add_argument("--gate", default=None, help="the file that releases the held save")
    args = parser.parse_args()

    def log(line: str) -> None:
        with open(args.log, "a") as handle:
            handle.write(f"{os.getpid()} {line}\n")
        print(f"inplace_writer: {line}", flush=True)

    state_dir = os.environ.get("NODUS_CHECKPOINT_DIR", "state")
    os.makedirs(state_dir, exist_ok=True)
    step, state = resume(state_dir, args.layout, log)
    while step < args.steps:
        time.sleep(args.sleep)
        step += 1
        state = advance(state, step)
        if step % args.save_every == 0:
            folder = os.path.join(state_dir, f"checkpoint-{step}")
            gate = args.gate if step == args.hold_at else None
            save(folder, args.layout, step, state, args.pause, log, gate)
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump({"step": step, "state": list(state)}, handle)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
