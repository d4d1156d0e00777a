"""A real Slurm cluster of two nodes on this machine, for the Slurm backend's tests.

``../shared/tools/slurm/local-cluster.sh start DIR`` (beside the repository, in CI as here)
installs Slurm and munge where missing, starts slurmctld and two slurmd (n1, n2) on 127.0.0.1
and waits until both are idle. ``.ci/run`` starts one and names its folder in
``NODUS_TEST_SLURM_DIR``; elsewhere the tests start their own (root only), or skip saying why.
A node is "lost" the way a machine is: its slurmd and every process of the job there killed at
once, the node set DOWN; :meth:`SlurmCluster.revive` brings it back for the next test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from polling import wait_for

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO.parent / "shared" / "tools" / "slurm" / "local-cluster.sh"
DIR_VAR = "NODUS_TEST_SLURM_DIR"
NODES = ("n1", "n2")


def unavailable() -> str | None:
    """Why no cluster can be started here, or None."""
    if os.environ.get(DIR_VAR):
        return None
    if not SCRIPT.exists():
        return f"no Slurm cluster: {SCRIPT} is not beside the repository"
    if os.geteuid() != 0:
        return "no Slurm cluster: starting one (slurmctld, slurmd, munge) needs root"
    if shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        return "no Slurm cluster: Slurm is not installed and apt-get is missing"
    return None


class SlurmCluster:
    """The cluster in ``folder`` (its ``slurm.conf``, logs and daemons' pid files)."""

    def __init__(self, folder: Path, started_here: bool) -> None:
        self.folder = folder
        self.conf = str(folder / "slurm.conf")
        self.started_here = started_here

    @classmethod
    def start(cls, folder: Path) -> SlurmCluster:
        given = os.environ.get(DIR_VAR)
        if given:
            return cls(Path(given), started_here=False)
        proc = subprocess.run(
            ["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True, timeout=600
        )
        if proc.returncode != 0:
            said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"no Slurm cluster: the shared script could not start one ({said})")
        return cls(folder, started_here=True)

    def stop(self) -> None:
        if self.started_here:
            subprocess.run(["bash", str(SCRIPT), "stop", str(self.folder)], timeout=300)

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": self.conf}

    def command(self, *argv: str) -> str:
        proc = subprocess.run(
            argv, env={**os.environ, **self.env()}, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, f"{argv}: {proc.stderr}"
        return proc.stdout

    def jobs(self, run_id: str) -> list[str]:
        """The run's jobs Slurm still knows as queued or running (``squeue``)."""
        lines = self.command("squeue", "-h", "-o", "%i %j").splitlines()
        return [line.split()[0] for line in lines if f"nodus-{run_id}-" in line]

    def job_node(self, job: str) -> str:
        return self.command("squeue", "-h", "-j", job, "-o", "%N").strip()

    def lose_node(self, node: str, job: str) -> None:
        """The node dies: its slurmd and the job's processes there killed at once (both nodes
        are this machine, so: every process of the job), then the controller is told."""
        victims = [int((self.folder / f"slurmd-{node}.pid").read_text())]
        victims += job_processes(job)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.command("scontrol", "update", f"nodename={node}", "state=down", "reason=lost-test")

    def revive(self, node: str) -> None:
        """Start the node's slurmd again (as the shared script does) and wait until it is idle."""
        with open(self.folder / "log" / f"slurmd-{node}.out", "ab") as log:
            daemon = subprocess.Popen(
                ["slurmd", "-D", "-N", node, "-f", self.conf],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env()},
                start_new_session=True,
            )
        (self.folder / f"slurmd-{node}.pid").write_text(str(daemon.pid))

        def idle() -> bool:
            state = self.command("sinfo", "-h", "-n", node, "-o", "%T").strip()
            if state.startswith("down"):
                subprocess.run(
                    ["scontrol", "update", f"nodename={node}", "state=resume"],
                    env={**os.environ, **self.env()},
                    capture_output=True,
                )
            return state == "idle"

        wait_for(idle, what=f"node {node} idle again")


def job_processes(job: str) -> list[int]:
    """Living processes whose environment says they belong to Slurm job ``job``."""
    marker = f"SLURM_JOB_ID={job}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            found.append(int(name))
    return found
