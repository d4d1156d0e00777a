"""`nodus run` against the bare program, and recovery against a cold start.

    .venv/bin/python benchmarks/runner.py [--steps 400] [--sleep 0.025] [--save-every 50]
                                          [--state-mib 64] [--repeat 3] [--dir SCRATCH]
                                          [--source-files 0] [--source-kib 4]

The program is the shipped directory-contract counter, saving a STATE_MIB checkpoint every
SAVE_EVERY steps of SLEEP seconds, in a project of SOURCE_FILES more files of SOURCE_KIB KiB
(the source every attempt's copy holds). Reported (median of REPEAT):

- overhead: wall of `nodus run` (acceptance, working copy, supervision, every capture, outputs,
  rotation after every commit at the default retention) over wall of the bare program on the
  same work in a plain folder; target <= 1.05x.
- rotation: the same run with retention that keeps everything (a pass after every commit that
  deletes nothing) against the default, which deletes the older checkpoints' state as it goes:
  the wall time rotation adds per commit, and how long after its commit a deletion is done
  (from the run's events; rotation runs beside the program, so it adds to neither by design).
- recovery: from SIGKILL of the program under nodus until the new attempt's program prints its
  first line having restored its state, vs the bare program's cold start (spawn until its
  first line, nothing to restore); target <= 1.3x. The two alternate, round by round, and
  both the ratio of the medians and the median of the rounds' ratios are reported.
  ``--recovery-only`` measures these two alone (and prints every round).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
# Every interpreter (runner, supervisor, program) with its bytecode cached, as an installed nodus.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from nodus.runner.catalog.core import Catalog

COUNTER = [sys.executable, "-m", "nodus.testing.counter"]


def program_args(args) -> list[str]:
    return [
        "--steps",
        str(args.steps),
        "--save-every",
        str(args.save_every),
        "--sleep",
        str(args.sleep),
        "--state-bytes",
        str(args.state_mib << 20),
        "--clock",
    ]


def bare(args, scratch: str) -> float:
    folder = tempfile.mkdtemp(dir=scratch)
    env = dict(os.environ, NODUS_CHECKPOINT_DIR=os.path.join(folder, "state"))
    started = time.perf_counter()
    subprocess.run(
        [*COUNTER, *program_args(args)], cwd=folder, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - started


KEEP_ALL = "keep_recoverable = 1000000\nkeep_adapters = 1000000\n"


def project(args, scratch: str, execution: str = "") -> tuple[str, dict]:
    folder = tempfile.mkdtemp(dir=scratch)
    write_source(folder, getattr(args, "source_files", 0), getattr(args, "source_kib", 4))
    with open(os.path.join(folder, "workload.toml"), "w") as handle:
        handle.write(
            f'name = "bench"\ncommand = {json.dumps([*COUNTER, *program_args(args)])}\n'
            f'outputs = ["out"]\n[execution]\nmax_recoveries = 100\n{execution}'
        )
    env = dict(os.environ, NODUS_HOME=folder + "-home")
    env.pop("NODUS_STORE", None)
    return folder, env


def write_source(folder: str, files: int, kib: int) -> None:
    """``files`` files of ``kib`` KiB beside the workload file: a project's code and data."""
    for number in range(files):
        path = os.path.join(folder, "src", f"{number % 20:02d}", f"file{number}.py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(os.urandom(kib << 10))


def under_nodus(args, scratch: str, execution: str = "") -> float:
    folder, env = project(args, scratch, execution)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "nodus", "run", "workload.toml", "--key", "bench"],
        cwd=folder,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    LAGS.extend(_deletion_lags(env["NODUS_HOME"]))
    return elapsed


def keeping_all(args, scratch: str) -> float:
    return under_nodus(args, scratch, KEEP_ALL)


LAGS: list[float] = []  # seconds from a commit to each deletion its rotation pass made


def _deletion_lags(home: str) -> list[float]:
    catalog = Catalog(home)
    run = catalog.find_by_key("bench")
    lags, committed = [], None
    for event in catalog.events(run.id):
        at = datetime.fromisoformat(event["at"]).timestamp()
        if event["type"] == "snapshot_committed":
            committed = at
        elif event["type"] == "snapshot_kind_deleted" and committed is not None:
            lags.append(at - committed)
    catalog.close()
    return lags


def cold_start(args, scratch: str) -> float:
    folder = tempfile.mkdtemp(dir=scratch)
    env = dict(os.environ, NODUS_CHECKPOINT_DIR=os.path.join(folder, "state"))
    started = time.monotonic()
    proc = subprocess.Popen(
        [*COUNTER, *program_args(args)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    _, printed = _first_line(proc.stdout.readline())
    proc.kill()
    proc.wait()
    return printed - started


def recovery(args, scratch: str) -> float:
    """SIGKILL after the first committed snapshot; time until the new attempt has restored."""
    folder, env = project(args, scratch)
    # What the runner says, shown if it fails; the runner writes it after this returns.
    said = open(folder + "-runner.log", "w+")  # noqa: SIM115
    runner = subprocess.Popen(
        [sys.executable, "-m", "nodus", "run", "workload.toml", "--key", "bench"],
        cwd=folder,
        env=env,
        stdout=said,
        stderr=said,
    )
    runner.said = said
    home = env["NODUS_HOME"]
    attempt = _poll(lambda: _committed_attempt(home), runner=runner)
    killed = time.monotonic()
    os.kill(attempt["pid"], signal.SIGKILL)
    log = os.path.join(
        home, "work", attempt["run_id"], "main", str(attempt["number"] + 1), "output.log"
    )
    # The line reaches the log through the runner's output thread; the program says when it
    # printed it, as the cold start's does, so neither side counts a relay.
    printed = _poll(lambda: _restored_line(log), runner=runner)
    elapsed = printed - killed
    runner.send_signal(signal.SIGTERM)
    runner.wait()
    said.close()
    return elapsed


def _committed_attempt(home: str) -> dict | None:
    if not os.path.exists(os.path.join(home, "nodus.db")):
        return None
    catalog = Catalog(home)
    run = catalog.find_by_key("bench")
    if run is None:
        return None
    committed = [e for e in catalog.events(run.id) if e["type"] == "snapshot_committed"]
    attempts = catalog.attempts(run.id, "main")
    if committed and attempts and attempts[-1]["pid"] and attempts[-1]["outcome"] is None:
        return {**attempts[-1], "run_id": run.id}
    return None


def _restored_line(log: str) -> float | None:
    """When the new attempt's program printed its first line, having restored a step."""
    try:
        with open(log) as handle:
            first = handle.readline()
    except FileNotFoundError:
        return None
    if not first.endswith("\n"):
        return None  # not written whole yet
    step, printed = _first_line(first)
    if step == 0:
        raise RuntimeError("the recovered program started at step 0: nothing was restored")
    return printed


def _first_line(line: str) -> tuple[int, float]:
    """(step, monotonic clock) of the counter's first line (printed with ``--clock``)."""
    match = re.match(r"counter: starting at step (\d+) .* at (\d+\.\d+)$", line.strip())
    if match is None:
        raise RuntimeError(f"not the counter's first line: {line!r}")
    return int(match[1]), float(match[2])


def _poll(predicate, interval: float = 0.01, timeout: float = 300, runner=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runner is not None and runner.poll() is not None:
            runner.said.seek(0)
            said = [line for line in runner.said if not line.startswith("[main] counter")]
            raise RuntimeError(
                f"the runner exited with status {runner.returncode}:\n" + "".join(said[-20:])
            )
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("benchmark step did not happen")


def add_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source-files", type=int, default=0, help="files of the project beside its workload"
    )
    parser.add_argument("--source-kib", type=int, default=4, help="the size of each")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--sleep", type=float, default=0.025)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--state-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument(
        "--recovery-only", action="store_true", help="only the cold start and the recovery"
    )
    add_source_options(parser)
    args = parser.parse_args()
    measures = [
        ("bare_s", bare),
        ("nodus_s", under_nodus),
        ("nodus_keeping_all_s", keeping_all),
    ]
    if args.recovery_only:
        measures = []
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        rows = {}
        for name, fn in measures:
            values = [fn(args, scratch) for _ in range(args.repeat)]
            rows[name] = statistics.median(values)
            rows[name.removesuffix("_s") + "_rounds"] = [round(v, 3) for v in values]
        # A cold start and a recovery side by side in each round: the machine's speed drifts
        # within minutes, and measured one block after the other the drift lands in the ratio.
        pairs = [(cold_start(args, scratch), recovery(args, scratch)) for _ in range(args.repeat)]
        for name, values in (
            ("cold_start", [c for c, _ in pairs]),
            ("recovery", [r for _, r in pairs]),
        ):
            rows[name + "_s"] = statistics.median(values)
            rows[name + "_rounds"] = [round(v, 3) for v in values]
        rows["recovery_vs_cold_start_of_rounds_x"] = statistics.median(r / c for c, r in pairs)
    if not args.recovery_only:
        rows["overhead_x"] = rows["nodus_s"] / rows["bare_s"]
        commits = args.steps // args.save_every
        added = (rows["nodus_s"] - rows["nodus_keeping_all_s"]) / commits
        rows["rotation_added_per_commit_s"] = added
        rows["deletion_after_commit_median_s"] = statistics.median(LAGS) if LAGS else float("nan")
        rows["deletions"] = len(LAGS) / args.repeat
    rows["recovery_vs_cold_start_x"] = rows["recovery_s"] / rows["cold_start_s"]
    print(json.dumps({k: _rounded(v) for k, v in rows.items()}, indent=2))


def _rounded(value):
    return value if isinstance(value, list) else round(value, 3)


if __name__ == "__main__":
    main()
