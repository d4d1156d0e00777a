"""Benchmark: saves of a world of two processes (``torchrun --nproc_per_node 2``, gloo on the CPU)
under hf-trainer-v1 vs the bare Trainer saving itself.

    .venv/bin/python benchmarks/trainer_save_ddp.py [--saves 3] [--width 512] [--skip-stall]
                                                    [--steps 200] [--run-width 128] [--skip-run]

Part 1 (stall): a GPT-2 (``--width``, 8 layers) is trained a few steps by two ranks, then saved
``--saves`` times each way at the same boundary, timed on rank 0 from a barrier until training
could go on: the bare Trainer's own ``_save_checkpoint`` on every rank (the whole stall: rank 0
writes the model, optimizer and scheduler, each rank its ``rng_state_<rank>.pth``) and nodus's
save (what ``Session._save`` does: ``store_flos``, every rank's RNG state gathered to rank 0 on
the gloo group, rank 0's capture to memory and hand-off to the background writer). Also timed:
the decision every optimizer boundary pays in a world (rank 0's save/stop broadcast). Target:
nodus stall <= 0.1x bare.

Part 2 (whole run): the same model (``--run-width``) trained ``--steps`` steps by a world of two
under ``torchrun``, bare with the Trainer saving every 10 steps vs under `nodus run` (explicit
hf-trainer-v1, ``save_every = 10``, a private NODUS_HOME: acceptance, supervision and the capture
of every save included). Target: <= 1.05x. Results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from trainer_save import _timed, build_trainer  # noqa: E402  (the single-process benchmark's)

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
BOUNDARIES = 200  # decisions timed


def stall_worker(saves: int, width: int, out: str) -> None:
    """Runs on every rank of the world (under torchrun); rank 0 writes the figures to ``out``."""
    import torch.distributed as dist

    from nodus.protocol import checkpoint_folder
    from nodus.stages.hf.inprocess.channel import ControlDir
    from nodus.stages.hf.inprocess.state_copy import Buffers, capture, rng_state
    from nodus.stages.hf.inprocess.world import World
    from nodus.stages.hf.inprocess.writer import CheckpointWriter

    work = os.path.dirname(out)
    trainer = build_trainer(os.path.join(work, "bare"), None, max_steps=2, width=width)
    trainer.train()  # optimizer state exists, as at a real boundary
    world = World()
    leader = world.leader
    bare = []
    for _ in range(saves):
        dist.barrier()
        start = time.perf_counter()
        trainer._save_checkpoint(trainer.model, None)
        dist.barrier()  # every rank's part is written: a bare world goes on together
        bare.append(time.perf_counter() - start)
    control = ControlDir(os.path.join(work, ".nodus"), os.path.join(work, "state"))
    writer = CheckpointWriter(control, trainer, on_published=lambda step: None)
    buffers = Buffers()  # as a Session does: reused from save to save
    ours, background = [], []
    for _ in range(saves + 1):
        dist.barrier()
        start = time.perf_counter()
        trainer.store_flos()
        states = world.gather(rng_state(trainer.args))
        if leader:
            writer.submit(capture(trainer, {}, [], buffers, rng_states=states))
        ours.append(time.perf_counter() - start)
        writer.wait()
        background.append(time.perf_counter() - start)
        if leader:
            shutil.rmtree(control.state_dir)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(BOUNDARIES):
        world.agree(False, False)
    decision = (time.perf_counter() - start) / BOUNDARIES
    if leader:
        folder = os.path.join(work, "bare", checkpoint_folder(trainer.state.global_step))
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        result = {
            "params": sum(p.numel() for p in trainer.model.parameters()),
            "bytes": size,
            "bare_s": statistics.median(bare),
            "nodus_stall_s": statistics.median(ours[1:]),  # the first allocates the buffers
            "nodus_write_s": statistics.median(background[1:]),
            "decision_s": decision,
        }
        with open(out, "w") as handle:
            json.dump(result, handle)


def stall(saves: int, width: int) -> dict:
    work = tempfile.mkdtemp(prefix="nodus-bench-ddp-")
    try:
        out = os.path.join(work, "result.json")
        command = [*TORCHRUN, os.path.abspath(__file__), "--stall-worker", str(saves)]
        _timed([*command, "--width", str(width), "--out", out], work)
        with open(out) as handle:
            return json.load(handle)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def whole_run(steps: int, width: int) -> dict:
    work = tempfile.mkdtemp(prefix="nodus-bench-ddp-run-")
    try:
        for name in ("bare", "source"):
            os.makedirs(os.path.join(work, name))
            for file_name in ("trainer_save.py", "trainer_save_ddp.py"):
                shutil.copy(os.path.join(HERE, file_name), os.path.join(work, name, file_name))
        command = [
            *TORCHRUN,
            *("trainer_save_ddp.py", "--run-width", str(width), "--program", str(steps)),
        ]
        workload = os.path.join(work, "workload.toml")
        with open(workload, "w") as handle:
            handle.write(
                f'name = "bench"\ncode = "source"\ncommand = {json.dumps([*command, "0"])}\n'
                'integration = "hf-trainer-v1"\n[execution]\nsave_every = 10\n'
            )
        home = {"NODUS_HOME": os.path.join(work, "home")}
        return {
            "bare": _timed([*command, "10"], os.path.join(work, "bare")),
            "nodus": _timed([sys.executable, "-m", "nodus", "run", workload], work, home),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def program(steps: int, save_steps: int, width: int) -> None:
    """The training program of part 2 (a plain Trainer; saves itself only when bare)."""
    build_trainer("out/trainer", save_steps or None, max_steps=steps, width=width).train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--width", type=int, default=512, help="GPT-2 n_embd, part 1")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--run-width", type=int, default=128, help="GPT-2 n_embd, part 2")
    parser.add_argument("--skip-run", action="store_true")
    parser.add_argument("--skip-stall", action="store_true")
    parser.add_argument("--program", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stall-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.program:
        return program(*options.program, options.run_width)
    if options.stall_worker:
        return stall_worker(options.stall_worker, options.width, options.out)
    if not options.skip_stall:
        report_stall(options.saves, options.width)
    if not options.skip_run:
        walls = whole_run(options.steps, options.run_width)
        print(
            f"whole run, world of 2, width {options.run_width}, {options.steps} steps, saves "
            f"every 10: bare {walls['bare']:.1f} s, nodus {walls['nodus']:.1f} s = "
            f"{walls['nodus'] / walls['bare']:.3f}x"
        )


def report_stall(saves: int, width: int) -> None:
    result = stall(saves, width)
    ratio = result["nodus_stall_s"] / result["bare_s"]
    print(
        f"world of 2, model: {result['params'] / 1e6:.1f}M parameters, "
        f"checkpoint {result['bytes'] / 2**20:.0f} MiB"
    )
    print(f"bare Trainer._save_checkpoint: {result['bare_s']:.3f} s (median of {saves})")
    print(
        f"nodus stall (RNG gather + capture + hand-off): {result['nodus_stall_s']:.3f} s "
        f"= {ratio:.3f}x bare"
    )
    print(f"nodus background write: {result['nodus_write_s']:.3f} s (overlaps training)")
    print(f"decision at every boundary (rank 0's broadcast): {result['decision_s'] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
