"""The runner benchmark's program on a local Ray cluster against ``backend = "local"``.

    .venv/bin/python benchmarks/ray_backend.py [--steps 200] [--sleep 0.01] [--state-mib 8]
                                               [--repeat 3]

Runs itself again inside a network namespace of its own with only loopback up (``unshare``,
as root), where it starts a Ray head and one worker node on 127.0.0.1, so no traffic leaves
loopback and everything of the cluster ends with the benchmark. The program is the shipped
directory-contract counter; the store is a ``file://`` folder declared shared (both nodes are
this machine). Reported, median of REPEAT, per backend:

- start-up: from the attempt's PREPARING to its RUNNING (working copy laid out, program
  started; on Ray also placing the agent, starting the node runner and relaying its news),
  and the Ray figure minus the local one (target: <= 2 s);
- per capture: the wall time a run with a capture every 10 steps takes over the same run with
  captures only at the end, divided by the extra captures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "raycluster"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from nodus.runner.catalog.core import Catalog  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.01)
    parser.add_argument("--state-mib", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    return parser.parse_args(argv)


def one_run(args, scratch: str, backend: str, save_every: int) -> dict[str, float]:
    root = tempfile.mkdtemp(dir=scratch)
    command = [
        sys.executable, "-m", "nodus.testing.counter", "--steps", str(args.steps),
        "--save-every", str(save_every), "--sleep", str(args.sleep),
        "--state-bytes", str(args.state_mib << 20),
    ]  # fmt: skip
    shared = "shared_store = true\n" if backend == "ray" else ""
    workload = os.path.join(root, "workload.toml")
    with open(workload, "w") as handle:
        handle.write(
            f'name = "bench"\ncommand = {json.dumps(command)}\n'
            f'[execution]\nbackend = "{backend}"\n{shared}'
        )
    home, store = os.path.join(root, "home"), f"file://{root}/store"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "nodus", "run", workload, "--home", home, "--store", store],
        cwd=root,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    catalog = Catalog(home)
    (run,) = catalog.list_runs()
    events = catalog.events(run.id)
    phases = {e["details"]["phase"]: e["at"] for e in events if e["type"] == "phase"}
    commits = sum(e["type"] == "snapshot_committed" for e in events)
    startup = _seconds(phases["RUNNING"]) - _seconds(phases["PREPARING"])
    return {"wall": wall, "startup": startup, "commits": commits}


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def measure(args) -> dict:
    from cluster import ADDRESS, LocalCluster

    scratch = tempfile.mkdtemp(prefix="nodus-ray-bench-")
    os.environ.update(RAY_ADDRESS=ADDRESS, NODUS_SETTLE_S="0.2")
    src = os.path.join(HERE, "..", "src")
    LocalCluster({"PYTHONPATH": src, "NODUS_NODE_HOME": os.path.join(scratch, "nodes")}).start()
    report = {}
    for backend in ("local", "ray"):
        often = [one_run(args, scratch, backend, 10) for _ in range(args.repeat)]
        rarely = [one_run(args, scratch, backend, args.steps) for _ in range(args.repeat)]
        extra = statistics.median(r["commits"] for r in often) - statistics.median(
            r["commits"] for r in rarely
        )
        wall_often = statistics.median(r["wall"] for r in often)
        wall_rarely = statistics.median(r["wall"] for r in rarely)
        report[backend] = {
            "startup_s": statistics.median(r["startup"] for r in often + rarely),
            "per_capture_s": (wall_often - wall_rarely) / max(extra, 1),
            "wall_s": wall_often,
            "captures": extra,
        }
    report["startup_over_local_s"] = report["ray"]["startup_s"] - report["local"]["startup_s"]
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    from cluster import in_private_namespace

    if not in_private_namespace():  # again, inside a namespace whose only interface is lo
        inner = " ".join([sys.executable, os.path.abspath(__file__), *(argv or sys.argv[1:])])
        return subprocess.call(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c",
             f"ip link set lo up && exec {inner}"]
        )  # fmt: skip
    print(json.dumps(measure(args), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
