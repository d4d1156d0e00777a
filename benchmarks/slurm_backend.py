"""The counter on a real two-node Slurm cluster against ``backend = "local"``.

    sudo .venv/bin/python benchmarks/slurm_backend.py [--repeat 5] [--state-mib 8]

Starts the shared tools' cluster (``../shared/tools/slurm/local-cluster.sh``, root: slurmctld,
two slurmd and munge on 127.0.0.1) in a scratch folder, or uses the one ``SLURM_CONF`` names,
and stops what it started. The program is the shipped directory-contract counter, saving on
SIGTERM; the store is a ``file://`` folder declared shared (both nodes are this machine).
Reported, median of REPEAT, each backend in turn round by round:

- start-up: from the attempt's PREPARING to its RUNNING (on Slurm: the job submitted,
  scheduled, its task started, the node runner's copy laid out and the program started, and
  the news relayed), and the Slurm figure minus the local one;
- notice to commit: from Slurm's signal ahead of the job's end (``scancel --batch
  --signal=USR1``, what ``--signal=B:USR1@lead`` sends at the lead time) to the snapshot the
  program saved at it being committed in the runner's catalog; beside it, the local backend's
  from the runner's SIGTERM (a preemption notice) to its commit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
sys.path.insert(0, SRC)
SCRIPT = os.path.join(HERE, "..", "..", "shared", "tools", "slurm", "local-cluster.sh")

from nodus.runner.catalog.core import Catalog  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--state-mib", type=int, default=8)
    return parser.parse_args(argv)


def one_run(args, scratch: str, backend: str) -> dict[str, float]:
    """A run stopped by a notice once its program caught SIGTERM: its start-up, and the time
    from the notice to the commit of the snapshot saved at it."""
    root = tempfile.mkdtemp(dir=scratch)
    command = [
        sys.executable, "-m", "nodus.testing.counter", "--steps", "100000",
        "--save-every", "0", "--sleep", "0.01", "--save-on-term",
        "--state-bytes", str(args.state_mib << 20),
    ]  # fmt: skip
    shared = "shared_store = true\n" if backend == "slurm" else ""
    workload = os.path.join(root, "workload.toml")
    with open(workload, "w") as handle:
        handle.write(
            f'name = "bench"\ncommand = {json.dumps(command)}\n'
            f'[execution]\nbackend = "{backend}"\n{shared}'
        )
    home, store = os.path.join(root, "home"), f"file://{root}/store"
    env = {**os.environ, "NODUS_SETTLE_S": "0.2", "PYTHONPATH": SRC}
    runner = subprocess.Popen(
        [sys.executable, "-m", "nodus", "run", workload, "--home", home, "--store", store],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    attempt = _wait(lambda: _running(home))
    _wait(lambda: _catches_sigterm(attempt["pid"]))
    noticed = time.time()
    if backend == "slurm":
        job = attempt["job"]["id"]
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True)
    else:
        os.killpg(runner.pid, signal.SIGTERM)
    committed = _wait(lambda: _commit(home))
    if backend == "slurm":  # the run would go on in a new job: its runner and jobs end here
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
        for job in _jobs(home):
            subprocess.run(["scancel", job], check=False)
    else:
        runner.wait()
    phases = _phases(home)
    return {
        "startup": phases["RUNNING"] - phases["PREPARING"],
        "notice_to_commit": committed - noticed,
    }


def _running(home: str) -> dict | None:
    if not os.path.exists(os.path.join(home, "nodus.db")):
        return None
    catalog = Catalog(home)
    try:
        runs = catalog.list_runs()
        rows = catalog.attempts(runs[0].id, "main") if runs else []
    finally:
        catalog.close()
    return rows[0] if rows and rows[0]["pid"] else None


def _jobs(home: str) -> list[str]:
    catalog = Catalog(home)
    try:
        (run,) = catalog.list_runs()
        rows = catalog.attempts(run.id, "main")
    finally:
        catalog.close()
    return [row["job"]["id"] for row in rows if row["job"]]


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as handle:
        mask = next(line for line in handle if line.startswith("SigCgt:"))
    return bool(int(mask.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def _commit(home: str) -> float | None:
    catalog = Catalog(home)
    try:
        (run,) = catalog.list_runs()
        found = [e for e in catalog.events(run.id) if e["type"] == "snapshot_committed"]
    finally:
        catalog.close()
    return _seconds(found[0]["at"]) if found else None


def _phases(home: str) -> dict[str, float]:
    catalog = Catalog(home)
    try:
        (run,) = catalog.list_runs()
        events = catalog.events(run.id)
    finally:
        catalog.close()
    phases: dict[str, float] = {}
    for event in events:
        if event["type"] == "phase":
            phases.setdefault(event["details"]["phase"], _seconds(event["at"]))
    return phases


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _wait(predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's run did not get there")
        time.sleep(0.005)


def measure(args, scratch: str) -> dict:
    rounds: dict[str, list[dict[str, float]]] = {"local": [], "slurm": []}
    for _ in range(args.repeat):
        for backend in rounds:
            rounds[backend].append(one_run(args, scratch, backend))
    report: dict = {}
    for backend, found in rounds.items():
        report[backend] = {
            key: round(statistics.median(r[key] for r in found), 3)
            for key in ("startup", "notice_to_commit")
        }
    report["startup_over_local_s"] = round(
        report["slurm"]["startup"] - report["local"]["startup"], 3
    )
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="nodus-slurm-bench-")
    started = None
    if not os.environ.get("SLURM_CONF"):
        started = os.path.join(scratch, "cluster")
        subprocess.run(["bash", SCRIPT, "start", started], check=True, capture_output=True)
        os.environ["SLURM_CONF"] = os.path.join(started, "slurm.conf")
    try:
        print(json.dumps(measure(args, scratch), indent=2))
    finally:
        if started:
            subprocess.run(["bash", SCRIPT, "stop", started], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
