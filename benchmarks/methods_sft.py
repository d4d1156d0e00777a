"""Benchmark: the sft example under `nodus run` vs the same TRL programs run bare.

    .venv/bin/python benchmarks/methods_sft.py [--steps 400] [--rounds 3]

Both sides train examples/sft (its tiny base model and data, built by its prepare.py) for
``--steps`` optimizer steps and export the merged model. Bare: ``python -m
nodus.stages.methods.train`` then ``…export`` in a copy of the example, with the resolved
settings in their environment and no nodus around them (no saves, no supervision). Under nodus:
``nodus run`` of the workload (acceptance, the source capture, saves every checkpoint_every with
their captures and rotation, both stages, the outputs) with a private NODUS_HOME. Rounds
alternate which goes first. Target: <= 1.05x. Results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "sft")
ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}


def prepare(root: str, steps: int) -> str:
    code = os.path.join(root, "sft")
    shutil.copytree(EXAMPLE, code, ignore=shutil.ignore_patterns("base", "data", "out"))
    shutil.copy(os.path.join(REPO, "examples", "tinybase.py"), root)
    subprocess.run([sys.executable, "prepare.py"], cwd=code, check=True)
    path = os.path.join(code, "workload.toml")
    with open(path, encoding="utf-8") as handle:
        text = re.sub(r"max_steps = \d+", f"max_steps = {steps}", handle.read())
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def bare(workload: str) -> float:
    """The train and export programs as nodus would start them, without nodus."""
    from nodus.schemas.loader import resolve_file

    resolved = resolve_file(workload)
    work = tempfile.mkdtemp(prefix="bare-")
    shutil.copytree(os.path.dirname(workload), work, dirs_exist_ok=True)
    start = time.perf_counter()
    for stage in resolved.stages:
        env = {**os.environ, **ENV, **stage.env}
        subprocess.run(stage.command, cwd=work, env=env, check=True, capture_output=True)
    took = time.perf_counter() - start
    shutil.rmtree(work)
    return took


def under_nodus(workload: str) -> float:
    home = tempfile.mkdtemp(prefix="nodus-home-")
    env = {**os.environ, **ENV, "NODUS_HOME": home}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "nodus", "run", workload], env=env, check=True, capture_output=True
    )
    took = time.perf_counter() - start
    shutil.rmtree(home)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    workload = prepare(tempfile.mkdtemp(prefix="bench-sft-"), options.steps)
    times: dict[str, list[float]] = {"bare": [], "nodus": []}
    for index in range(options.rounds):
        order = [("bare", bare), ("nodus", under_nodus)]
        for name, measure in order if index % 2 == 0 else reversed(order):
            times[name].append(measure(workload))
            print(f"round {index + 1}: {name} {times[name][-1]:.2f} s", flush=True)
    bare_s, nodus_s = (statistics.median(times[k]) for k in ("bare", "nodus"))
    print(f"median: bare {bare_s:.2f} s, nodus {nodus_s:.2f} s, ratio {nodus_s / bare_s:.3f}x")


if __name__ == "__main__":
    main()
