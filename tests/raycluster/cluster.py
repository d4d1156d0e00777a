"""A real local Ray cluster on loopback, for tests that already run in a private network namespace.

``ray start --head --node-ip-address=127.0.0.1`` still registers the node on the machine's other
interface address (ray-project/ray #59110, #26293); inside a network namespace whose only
interface is ``lo`` it registers 127.0.0.1 and all traffic stays on loopback. So the cluster is
only ever started by :mod:`cluster_cases`, which :mod:`test_ray_backend` runs under
``unshare --net --pid`` (:func:`in_private_namespace` checks); when that namespace's first
process ends, the kernel ends every process of the cluster with it.

The head has 1 CPU and each worker node 2, with a resource naming its generation, so a test can
place a stage on the worker (``cpus = 2``), kill that node (its raylet) and add a new one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from polling import wait_for

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 6390
ADDRESS = f"127.0.0.1:{HEAD_PORT}"
# Find a dead node within seconds (defaults: about 30 s), so a node loss is seen soon.
FAST_HEALTH = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_USAGE_STATS_ENABLED": "0",
}
_COMMON = ["--node-ip-address=127.0.0.1", "--disable-usage-stats", "--object-store-memory=78643200"]


def in_private_namespace() -> bool:
    """True in a network namespace with no interface but loopback (/proc/net is this
    namespace's; /sys/class/net may still be the machine's)."""
    with open("/proc/net/dev") as handle:
        names = [line.split(":", 1)[0].strip() for line in handle.readlines()[2:]]
    return names == ["lo"]


class LocalCluster:
    """A head plus worker nodes on 127.0.0.1; ``env`` reaches every Ray worker process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = {**os.environ, **FAST_HEALTH, **env}
        self.generation = 0

    def start(self) -> LocalCluster:
        self._ray(
            "start", "--head", f"--port={HEAD_PORT}", "--num-cpus=1", "--include-dashboard=false"
        )
        self.add_worker()
        return self

    def add_worker(self) -> str:
        """A new worker node with 2 CPUs; the name of its generation's resource."""
        self.generation += 1
        name = f"worker{self.generation}"
        self._ray(
            "start", f"--address={ADDRESS}", "--num-cpus=2", f"--resources={json.dumps({name: 1})}"
        )
        wait_for(lambda: self._alive_workers() >= 1, f"Ray node {name}", timeout=60)
        return name

    def kill_worker(self) -> int:
        """SIGKILL the current worker node's raylet: the node is lost; its pid."""
        name = f"worker{self.generation}"
        for pid in _pids():
            command = _cmdline(pid)
            if "raylet" in command.split(" ", 1)[0] and name in command:
                os.kill(pid, signal.SIGKILL)
                return pid
        raise AssertionError(f"no raylet of {name} found")

    def _alive_workers(self) -> int:
        return sum(
            1
            for pid in _pids()
            if f"worker{self.generation}" in _cmdline(pid)
            and "raylet" in _cmdline(pid).split(" ", 1)[0]
        )

    def _ray(self, *args: str) -> None:
        subprocess.run(
            [RAY, *args, *_COMMON],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
