"""An attempt's supervisor: from its spawn until the program runs under it, and until its end is
reported, against another checkout's in the same rounds.

    .venv/bin/python benchmarks/supervisor.py [--repeat 15] [--b OTHER_CHECKOUT/src]

Each round spawns a supervisor as an attempt does (``spawn_supervisor``), starts ``/bin/true``
under it at once (``StageProcess.start``: the runner waits for the program's start) and waits
for the report that the program and its tree are gone. A launch waits for the first figure
whenever the runner is ready before its supervisor is: the supervisor's interpreter boot, its
imports, the start of the program. Each checkout runs in a process of its own (``PYTHONPATH``
names its ``src``), the two alternating; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

_ROUND = """
import json, os, sys, time
from nodus.runner.processes.stage_process import StageProcess, spawn_supervisor

folder = sys.argv[1]
spawned = time.perf_counter()
supervisor = spawn_supervisor(f"bench/{os.getpid()}")
program = StageProcess(
    ["/bin/true"],
    cwd=folder,
    env={"PATH": "/usr/bin:/bin"},
    log_path=os.path.join(folder, "output.log"),
    prefix="bench",
    token=f"bench/{os.getpid()}",
    grace_s=1.0,
    terminal=open(os.devnull, "w"),
)
program.start(supervisor)
started = time.perf_counter()
assert program.wait(10) == 0
ended = time.perf_counter()
print(json.dumps({"started": started - spawned, "ended": ended - started}))
"""


def one_round(src: str, folder: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed nodus has its bytecode cached
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, folder], env=env, capture_output=True, text=True, check=True
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--b", help="src folder of another checkout, timed in the same rounds")
    args = parser.parse_args()
    sides = {"A": SRC, **({"B": args.b} if args.b else {})}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as folder:
        for src in sides.values():
            one_round(src, folder)  # warm: bytecode written, page cache filled
        for number in range(args.repeat):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for name in order:
                rounds[name].append(one_round(sides[name], folder))
    report = {}
    for name, figures in rounds.items():
        prefix = "" if name == "A" else "b_"
        for measure, key in (("started", "spawn_to_started_ms"), ("ended", "started_to_ended_ms")):
            median = statistics.median(figure[measure] for figure in figures)
            report[prefix + key] = round(median * 1000, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
