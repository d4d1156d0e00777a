"""Benchmark: the sft example under `nodus run` vs the same TRL program run bare, saving itself.

    .venv/bin/python benchmarks/methods_sft.py [--steps 60] [--rounds 3]

Both sides train examples/sft (its tiny base model and data, built by its prepare.py; LoRA
rank 8) for ``--steps`` optimizer steps, save every ``checkpoint_every`` (6) steps and export
the merged model, and each side is timed as a whole wall time, process start to exit:

- bare: nodus's own train program (``nodus.stages.methods.train.main``, the same TRL
  ``SFTTrainer`` with the same settings) run without nodus, with TRL's own saving turned on at
  the same cadence (``save_strategy="steps"``, ``save_steps = checkpoint_every``,
  ``save_total_limit = checkpoint_keep``), then the export program;
- nodus: ``nodus run`` of the workload with a private NODUS_HOME (acceptance, the source
  capture, the saves with their captures, commits and rotation, both stages, the outputs).

Both sides import nodus (the bare side for the train program itself), and nodus's modules are
byte-compiled first (:func:`compile_nodus`), as installing it does: in a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` every process would otherwise compile them again each round, and
the nodus side, which imports more of them in more processes (runner, supervisors, bootstrap),
would pay a cost a user's installed nodus never has (about 0.1-0.2 s a run here). Torch,
Transformers and TRL come compiled with their install, on both sides.

Rounds alternate which side goes first; the medians are compared. Target: <= 1.05x. The default
(60 steps, 10 saves, 3 rounds) takes about a minute on 2 cores. Results go to
docs/benchmarks.md by hand, measured on a quiet machine.
"""

from __future__ import annotations

import argparse
import compileall
import json
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
BARE_TRAIN = "bare-train"


def prepare(root: str, steps: int) -> str:
    """A copy of examples/sft, prepared, training ``steps`` steps; its workload file."""
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


def compile_nodus() -> None:
    """nodus's bytecode, written once as an install writes it (see the module's docstring)."""
    import nodus

    compileall.compile_dir(os.path.dirname(nodus.__file__), quiet=1)


def bare(workload: str) -> float:
    """The train program saving itself, then the export program, in a copy, without nodus."""
    from nodus.schemas.loader import resolve_file

    train, export = resolve_file(workload).stages
    work = tempfile.mkdtemp(prefix="bare-")
    shutil.copytree(os.path.dirname(workload), work, dirs_exist_ok=True)
    env = {**os.environ, **ENV, **train.env}
    start = time.perf_counter()
    _quiet([sys.executable, os.path.abspath(__file__), BARE_TRAIN], work, env)
    _quiet(list(export.command), work, {**os.environ, **ENV, **export.env})
    took = time.perf_counter() - start
    shutil.rmtree(work)
    return took


def bare_train() -> None:
    """The bare side's train process: nodus's train program with TRL's own saving on the
    cadence nodus saves at (runs in the copy, its settings in the environment)."""
    from nodus import protocol
    from nodus.stages.methods import train

    settings = json.loads(os.environ[protocol.ENV_METHOD])
    train.main(
        {
            "output_dir": "checkpoints",
            "save_strategy": "steps",
            "save_steps": settings["checkpoint_every"],
            "save_total_limit": settings["checkpoint_keep"],
        }
    )


def under_nodus(workload: str) -> float:
    home = tempfile.mkdtemp(prefix="nodus-home-")
    env = {**os.environ, **ENV, "NODUS_HOME": home}
    start = time.perf_counter()
    _quiet([sys.executable, "-m", "nodus", "run", workload], os.path.dirname(workload), env)
    took = time.perf_counter() - start
    shutil.rmtree(home)
    return took


def _quiet(command: list[str], cwd: str, env: dict[str, str]) -> None:
    """Run ``command`` to its end; its output only when it fails."""
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    times: dict[str, list[float]] = {"bare": [], "nodus": []}
    compile_nodus()
    with tempfile.TemporaryDirectory(prefix="bench-sft-") as root:
        workload = prepare(root, options.steps)
        for index in range(options.rounds):
            order = [("bare", bare), ("nodus", under_nodus)]
            for name, measure in order if index % 2 == 0 else reversed(order):
                times[name].append(measure(workload))
                print(f"round {index + 1}: {name} {times[name][-1]:.2f} s", flush=True)
    bare_s, nodus_s = (statistics.median(times[k]) for k in ("bare", "nodus"))
    print(f"median: bare {bare_s:.2f} s, nodus {nodus_s:.2f} s, ratio {nodus_s / bare_s:.3f}x")


if __name__ == "__main__":
    if sys.argv[1:] == [BARE_TRAIN]:
        bare_train()
    else:
        main()
