"""Recovery time of a Trainer program: SIGKILL of the program → first step of the next attempt.

    .venv/bin/python benchmarks/recovery.py [--program quickstart|lm-example] [--repeat 5]
                                            [--kill-after 18] [--lines 110] [--epochs 40]
                                            [--dir SCRATCH]

Each round is a fresh `nodus run` of the program under hf-trainer-v1 (the quick start's own
workload: a save every 6 steps and at each epoch end), trained for EPOCHS epochs so that it is
still training when it is killed. Once attempt 1 has committed the snapshot
of step KILL_AFTER, its program is SIGKILLed; the clock runs from the kill until attempt 2's log
shows its first optimizer step (the Trainer's first ``{'loss': …}`` line). Reported per round and
as medians: ``runner_s`` (kill → attempt 2's program started: the runner notices, captures, lays
the copy out again and restores), ``program_s`` (that start → first step: imports, data
preparation, resume) and their sum ``total_s``; for comparison ``first_program_s``, the same
start → first step of attempt 1, which prepares its data from scratch.

``quickstart`` is examples/quickstart/train.py (an in-memory dataset). ``lm-example`` is
tests/hf/programs/lm_example.py (run_clm.py's shape) on a generated text file of LINES lines,
whose tokenized and grouped data a recovery may find in the `datasets` cache.

The script drives the nodus next to it (``../src``), so a copy of it in another checkout
measures that checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
sys.path.insert(0, SRC)

from nodus.runner.catalog.core import Catalog  # noqa: E402

QUICKSTART = os.path.join(HERE, "..", "examples", "quickstart")
LM_EXAMPLE = os.path.join(HERE, "..", "tests", "hf", "programs", "lm_example.py")
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "nodus",
    "keeps",
    "every",
    "step",
    "safe",
]
KEY = "bench"


def project(args, scratch: str) -> tuple[str, dict[str, str]]:
    """A copy of the quick-start folder (with the LM program and its data if asked), its env."""
    folder = tempfile.mkdtemp(dir=scratch)
    code = os.path.join(folder, "code")
    shutil.copytree(QUICKSTART, code, ignore=shutil.ignore_patterns("out", "state", ".nodus"))
    workload = os.path.join(code, "workload.toml")
    if args.program == "lm-example":
        shutil.copy(LM_EXAMPLE, code)
        with open(os.path.join(code, "train.txt"), "w") as handle:
            for i in range(args.lines):
                words = (WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(9))
                handle.write(" ".join(words) + ".\n")
        with open(workload) as handle:
            text = handle.read().replace('"train.py"', '"lm_example.py"')
        with open(workload, "w") as handle:
            handle.write(text)
    env = dict(os.environ, NODUS_HOME=os.path.join(folder, "home"), PYTHONPATH=SRC)
    # The workload says `python`: this interpreter's, with the training stack installed.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"  # the first step's line reaches the log when it is printed
    # Long enough that the kill lands while the program trains.
    env["QUICKSTART_EPOCHS"] = env["LM_EPOCHS"] = str(args.epochs)
    env.pop("NODUS_STORE", None)
    return code, env


def one_round(args, scratch: str) -> dict[str, float]:
    code, env = project(args, scratch)
    home = env["NODUS_HOME"]
    said = open(os.path.join(code, "..", "runner.log"), "w+")  # noqa: SIM115 - the runner writes it
    runner = subprocess.Popen(
        [sys.executable, "-m", "nodus", "run", "workload.toml", "--key", KEY],
        cwd=code,
        env=env,
        stdout=said,
        stderr=said,
        start_new_session=True,
    )
    try:
        cold = poll(lambda: attempt(home, 1), runner, said, interval=0.002)
        cold_started = time.perf_counter()
        poll(lambda: first_step(cold["log_path"]), runner, said, interval=0.002)
        cold_stepped = time.perf_counter()
        first = poll(lambda: committed(home, args.kill_after), runner, said)
        killed = time.perf_counter()
        os.kill(first["pid"], signal.SIGKILL)
        second = poll(lambda: attempt(home, 2), runner, said, interval=0.002)
        started = time.perf_counter()
        poll(lambda: first_step(second["log_path"]), runner, said, interval=0.002)
        stepped = time.perf_counter()
    finally:
        runner.send_signal(signal.SIGTERM)  # a preemption notice: the runner stops it all
        runner.wait()
        said.close()
    return {
        "first_program_s": cold_stepped - cold_started,
        "runner_s": started - killed,
        "program_s": stepped - started,
        "total_s": stepped - killed,
    }


def committed(home: str, step: int) -> dict | None:
    """Attempt 1 while it runs, once it has committed a snapshot of ``step`` or later."""
    run = find_run(home)
    if run is None:
        return None
    catalog = Catalog(home)
    try:
        steps = [
            e["details"].get("step")
            for e in catalog.events(run)
            if e["type"] == "snapshot_committed"
        ]
    finally:
        catalog.close()
    if any(s is not None and s >= step for s in steps):
        return attempt(home, 1)
    return None


def attempt(home: str, number: int) -> dict | None:
    """Attempt ``number`` once its program has started (pid and log known)."""
    run = find_run(home)
    if run is None:
        return None
    catalog = Catalog(home)
    try:
        attempts = catalog.attempts(run, "main")
    finally:
        catalog.close()
    if len(attempts) >= number and attempts[number - 1]["pid"]:
        return attempts[number - 1]
    return None


def find_run(home: str) -> str | None:
    if not os.path.exists(os.path.join(home, "nodus.db")):
        return None
    catalog = Catalog(home)
    try:
        run = catalog.find_by_key(KEY)
    finally:
        catalog.close()
    return run.id if run is not None else None


def first_step(log: str) -> bool:
    try:
        with open(log, errors="replace") as handle:
            return "{'loss':" in handle.read()
    except FileNotFoundError:
        return False


def poll(predicate, runner, said, interval: float = 0.01, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runner.poll() is not None:
            said.seek(0)
            raise RuntimeError(
                f"the runner exited with status {runner.returncode}:\n" + said.read()[-3000:]
            )
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("the benchmark's moment never came")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--program", choices=("quickstart", "lm-example"), default="quickstart")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--kill-after", type=int, default=18)
    parser.add_argument("--lines", type=int, default=110, help="lm-example: lines of text")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for number in range(args.repeat):
            rounds.append(one_round(args, scratch))
            print(f"round {number + 1}: " + json.dumps(rounds[-1]), flush=True)
    medians = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    print(json.dumps({"median": {k: round(v, 3) for k, v in medians.items()}}, indent=2))


if __name__ == "__main__":
    main()
