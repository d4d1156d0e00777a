"""Helpers for the runner tests: real workload files, real `nodus` processes, real signals.

Every stage program here is the shipped ``nodus.testing.counter`` (or a small script around it),
so a run's result can be compared with :func:`expected_value` of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from nodus.runner.catalog.core import Catalog
from nodus.runner.processes.containment import TOKEN_VAR
from polling import wait_for

NODUS = [sys.executable, "-m", "nodus"]
GATED_COUNTER = Path(__file__).parent / "programs" / "gated_counter.py"
# Checkpoint folders settle quickly here, so kills land between captured steps; a run's lease
# in the store is read back soon after it is written (the race tests keep the default).
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}


class Project:
    """A code folder with a workload file, and the `nodus` command line pointed at a home."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.home = home
        self.file = root / "workload.toml"
        self.gate = root.parent / f"{root.name}-done-killing"  # outside the working copy

    def write(
        self,
        *,
        steps: int = 40,
        save_every: int = 10,
        sleep: float = 0.0,
        extra_args: tuple[str, ...] = (),
        command: list[str] | None = None,
        body: str = "",
        gated: bool = False,
    ) -> Project:
        """The counter's workload. ``gated``: the counter sleeps between steps only until the
        test calls :meth:`done_killing` (``programs/gated_counter.py``), so the steps left after
        the last kill run at full speed instead of the test waiting for them."""
        gate = [str(GATED_COUNTER), str(self.gate)]
        program = gate if gated else ["-m", "nodus.testing.counter"]
        command = command or [
            sys.executable,
            *program,
            "--steps",
            str(steps),
            "--save-every",
            str(save_every),
            "--sleep",
            str(sleep),
            *extra_args,
        ]
        self.file.write_text(
            f'name = "counter"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n{body}'
        )
        return self

    def done_killing(self) -> None:
        """A ``gated`` counter runs the steps it has left without sleeping."""
        self.gate.touch()

    def env(self, extra: dict | None = None) -> dict:
        env = dict(os.environ, NODUS_HOME=str(self.home), **FAST)
        env.pop("NODUS_STORE", None)
        env.update(extra or {})
        return env

    def nodus(self, *args: str, timeout: float = 120, env: dict | None = None):
        return subprocess.run(
            [*NODUS, *args],
            cwd=self.root,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        """`nodus ARGS` in the background (its own session, so signals reach only it)."""
        return subprocess.Popen(
            [*NODUS, *args],
            cwd=self.root,
            env=self.env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def get(self, ref: str) -> dict:
        proc = self.nodus("runs", "get", ref, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def catalog(self) -> Catalog:
        return Catalog(str(self.home))

    def result(self, run_id: str, stage: str = "main") -> dict:
        """The counter's result file, read back from the run's committed outputs."""
        from nodus.store import open_store

        store = open_store("file://" + str(self.home / "store"))
        manifests = store.list(run=run_id, stage=stage, role="outputs")
        assert manifests, f"{run_id} committed no outputs"
        target = self.root.parent / f"outputs-{manifests[-1].id}"
        store.restore(manifests[-1].id, str(target))
        return json.loads((target / "out" / "result.json").read_text())

    def store(self):
        from nodus.store import open_store

        return open_store("file://" + str(self.home / "store"))


def catches(pid: int, signum: int) -> bool:
    """Whether the process ``pid`` has a handler for ``signum`` (its ``SigCgt`` mask): a program
    that sets one as it starts (``--save-on-term``) may take seconds to get there when loaded."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def running_attempt(catalog: Catalog, run_id: str, stage: str = "main") -> dict | None:
    """The attempt whose program is running now (pid known and alive, not ended).

    A dead runner leaves its last attempt marked running until the next runner reaps it, so
    only the newest attempt counts, and only while its program lives.
    """
    attempts = catalog.attempts(run_id, stage)
    newest = attempts[-1] if attempts else None
    if newest and newest["outcome"] is None and newest["pid"] and pid_alive(newest["pid"]):
        return newest
    return None


def committed_steps(project: Project, run_id: str) -> list[int]:
    """Steps of the run's snapshots in the store now (rotation may have removed older ones)."""
    return [m.step for m in project.store().list(run=run_id, stage="main")]


def commits(project: Project, run_id: str) -> list[dict]:
    """Every ``snapshot_committed`` event of the run, oldest first, whatever retention did since."""
    events = project.catalog().events(run_id)
    return [e["details"] for e in events if e["type"] == "snapshot_committed"]


def kill_program(project: Project, run_id: str, after_step: int | None = None) -> int:
    """SIGKILL the running program (optionally once a snapshot beyond ``after_step`` exists)."""
    catalog = project.catalog()
    if after_step is not None:
        wait_for(
            lambda: any(s > after_step for s in committed_steps(project, run_id)),
            what=f"a snapshot after step {after_step}",
        )
    attempt = wait_for(lambda: _running_or_fail(catalog, run_id), what="a running attempt")
    os.kill(attempt["pid"], signal.SIGKILL)
    return attempt["number"]


def _running_or_fail(catalog: Catalog, run_id: str) -> dict | None:
    attempt = running_attempt(catalog, run_id)
    if attempt is None and catalog.get_run(run_id).finished:
        raise AssertionError(f"{run_id} finished before it could be killed; make it longer")
    return attempt


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


def token_carriers(run_id: str) -> dict[int, str]:
    """{pid: command line} of the living processes carrying a token of the run.

    The test's own scan of /proc, so a sweep that overlooks a process cannot hide it here.
    """
    marker = f"{TOKEN_VAR}={run_id}/".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                carries = any(e.startswith(marker) for e in handle.read().split(b"\0"))
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if carries and pid_alive(int(name)):
            found[int(name)] = command
    return found
