"""Benchmark: training stall per save under hf-trainer-v1 vs a bare ``Trainer._save_checkpoint``.

    .venv/bin/python benchmarks/trainer_save.py [--saves 3] [--steps 30] [--skip-run]
                                                [--width 512] [--skip-stall] [--bf16]

The whole-run figure of issue 17: ``--skip-stall --width 128 --steps 300`` (GPT-2 of width 128).
``--bf16`` trains in mixed precision (``bf16=True``: bfloat16 autocast on the CPU) both ways, the
mixed-precision extension's figures (issue 28).

Part 1 (stall): a ~50M-parameter GPT-2 is trained a few steps in this process, then saved
``--saves`` times each way at the same boundary: the bare Trainer's own ``_save_checkpoint`` (the
whole stall) and nodus's capture-to-memory + hand-off (the stall; the background write is timed
separately and overlaps training). Target: nodus stall <= 0.3x bare.

Part 2 (whole run): the same model trained ``--steps`` steps as a real program, bare with the
Trainer saving every 10 steps vs under `nodus run` (explicit hf-trainer-v1, ``save_every = 10``,
a private NODUS_HOME: acceptance, supervision and the capture of every save included).
Target: <= 1.05x. Results go to docs/benchmarks.md ("Trainer save") by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_trainer(
    output_dir: str, save_steps: int | None, max_steps: int, width: int = 512, bf16: bool = False
):
    import torch
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

    set_seed(0)
    config = GPT2Config(vocab_size=50257, n_positions=128, n_embd=width, n_layer=8, n_head=8)
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 50257, (64, 64), generator=torch.Generator().manual_seed(0)).tolist()
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=max_steps,
        per_device_train_batch_size=2,
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        bf16=bf16,
        seed=0,
    )
    return Trainer(model=model, args=args, train_dataset=data)


def stall(saves: int, width: int, bf16: bool = False) -> dict:
    from nodus.stages.hf.inprocess.channel import ControlDir
    from nodus.stages.hf.inprocess.state_copy import Buffers, capture
    from nodus.stages.hf.inprocess.writer import CheckpointWriter

    work = tempfile.mkdtemp(prefix="nodus-bench-")
    try:
        trainer = build_trainer(
            os.path.join(work, "bare"), None, max_steps=2, width=width, bf16=bf16
        )
        trainer.train()  # optimizer state exists, as at a real boundary
        params = sum(p.numel() for p in trainer.model.parameters())
        bare = []
        for _ in range(saves):
            start = time.perf_counter()
            trainer._save_checkpoint(trainer.model, None)
            bare.append(time.perf_counter() - start)
        folder = os.path.join(work, "bare", f"checkpoint-{trainer.state.global_step}")
        size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
        control = ControlDir(os.path.join(work, ".nodus"), os.path.join(work, "state"))
        writer = CheckpointWriter(control, trainer, on_published=lambda step: None)
        ours, background = [], []
        buffers = Buffers()  # as a Session does: reused from save to save
        for _ in range(saves + 1):
            start = time.perf_counter()
            writer.submit(capture(trainer, {}, [], buffers))
            ours.append(time.perf_counter() - start)
            writer.wait()
            background.append(time.perf_counter() - start)
            shutil.rmtree(control.state_dir)
        ours, background = ours[1:], background[1:]  # the first save allocates the buffers
        return {
            "params": params,
            "bytes": size,
            "bare_s": statistics.median(bare),
            "nodus_stall_s": statistics.median(ours),
            "nodus_write_s": statistics.median(background),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def whole_run(steps: int, width: int, bf16: bool = False) -> dict:
    work = tempfile.mkdtemp(prefix="nodus-bench-run-")
    try:
        for name in ("bare", "source"):
            os.makedirs(os.path.join(work, name))
            shutil.copy(os.path.abspath(__file__), os.path.join(work, name, "bench.py"))
        command = [sys.executable, "bench.py", "--width", str(width), "--program", str(steps)]
        if bf16:
            command.insert(2, "--bf16")
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


def _timed(command: list[str], cwd: str, env: dict | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-3000:] + proc.stderr[-3000:])
    return time.perf_counter() - start


def program(steps: int, save_steps: int, width: int, bf16: bool = False) -> None:
    """The training program of part 2 (a plain Trainer; saves itself only when bare)."""
    build_trainer("out/trainer", save_steps or None, steps, width, bf16).train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip-run", action="store_true")
    parser.add_argument("--skip-stall", action="store_true")
    parser.add_argument("--width", type=int, default=512, help="GPT-2 n_embd (default 512)")
    parser.add_argument("--bf16", action="store_true", help="bf16=True (autocast) both ways")
    parser.add_argument("--program", nargs=2, type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.program:
        return program(*options.program, options.width, options.bf16)
    if not options.skip_stall:
        report_stall(options.saves, options.width, options.bf16)
    if not options.skip_run:
        walls = whole_run(options.steps, options.width, options.bf16)
        precision = "bf16" if options.bf16 else "float32"
        print(
            f"whole run, {precision}, width {options.width}, {options.steps} steps, "
            "saves every 10: "
            f"bare {walls['bare']:.1f} s, nodus {walls['nodus']:.1f} s = "
            f"{walls['nodus'] / walls['bare']:.3f}x"
        )


def report_stall(saves: int, width: int, bf16: bool = False) -> None:
    result = stall(saves, width, bf16)
    ratio = result["nodus_stall_s"] / result["bare_s"]
    print(
        f"model ({'bf16 autocast' if bf16 else 'float32'}): {result['params'] / 1e6:.1f}M "
        "parameters, "
        f"checkpoint {result['bytes'] / 2**20:.0f} MiB"
    )
    print(f"bare Trainer._save_checkpoint: {result['bare_s']:.3f} s (median of {saves})")
    print(f"nodus stall (capture + hand-off): {result['nodus_stall_s']:.3f} s = {ratio:.2f}x bare")
    print(f"nodus background write: {result['nodus_write_s']:.3f} s (overlaps training)")


if __name__ == "__main__":
    main()
