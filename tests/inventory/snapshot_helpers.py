"""Shared helpers of the snapshot-command tests (imported as ``snapshot_helpers``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from polling import wait_for

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
PROGRAMS = Path(__file__).resolve().parents[1] / "hf" / "programs"  # shared test programs
NODUS = [sys.executable, "-m", "nodus"]
HF_STEPS = 14
COUNTER_STEPS = 40


@dataclass
class Home:
    """A $NODUS_HOME and the `nodus` command line pointed at it."""

    path: Path

    @property
    def store_url(self) -> str:
        return "file://" + str(self.path / "store")

    def env(self, extra: dict | None = None) -> dict:
        env = dict(
            os.environ,
            NODUS_HOME=str(self.path),
            NODUS_SETTLE_S="0.2",
            QUICKSTART_MAX_STEPS=str(HF_STEPS),
        )
        env.pop("NODUS_STORE", None)
        env.update(extra or {})
        return env

    def nodus(
        self, *args: str, cwd=None, timeout: float = 300, **popen
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*NODUS, *args],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            **popen,
        )

    def json(self, *args: str):
        proc = self.nodus(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def catalog(self):
        from nodus.runner.catalog.core import Catalog

        return Catalog(str(self.path))

    def store(self, url: str | None = None):
        from nodus.store import open_store

        return open_store(url or self.store_url)


@dataclass
class RunInfo:
    home: Home
    run_id: str
    key: str | None
    project: Path


def accepted_id(home: Home, key: str) -> str:
    return home.catalog().get_run(key).id


def counter_workload(project: Path, *, resume: bool = True, outputs: bool = True) -> Path:
    command = [
        sys.executable,
        "-m",
        "nodus.testing.counter",
        "--steps",
        str(COUNTER_STEPS),
        "--save-every",
        "5",
        "--sleep",
        "0.05",
    ]
    text = f'name = "counter"\ncommand = {json.dumps(command)}\n'
    if outputs:
        text += 'outputs = ["out"]\n'
    text += f'[continuity]\nmode = "checkpointed"\nresume_on_interruption = {str(resume).lower()}\n'
    text += "[execution]\nkeep_recoverable = 100\n"  # listings and plots show every save
    project.mkdir(parents=True, exist_ok=True)
    path = project / "workload.toml"
    path.write_text(text)
    return path


def run_with_one_kill(home: Home, project: Path, key: str) -> RunInfo:
    """`nodus run` the counter and SIGKILL its program once a snapshot past step 10 exists."""
    runner = subprocess.Popen(
        [*NODUS, "run", "workload.toml", "--key", key],
        cwd=project,
        env=home.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        run_id = wait_for(lambda: _run_id_or_none(home, key), what="the run to be accepted")
        wait_for(
            lambda: any((m.step or 0) > 10 for m in home.store().list(run=run_id)),
            what="a snapshot past step 10",
        )
        attempt = wait_for(lambda: _running_attempt(home, run_id), what="a running attempt")
        os.kill(attempt["pid"], signal.SIGKILL)
        runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    return RunInfo(home, run_id, key, project)


def _run_id_or_none(home: Home, key: str) -> str | None:
    from nodus.errors import NodusError

    if not (home.path / "nodus.db").exists():
        return None
    try:
        return home.catalog().get_run(key).id
    except NodusError:
        return None


def _running_attempt(home: Home, run_id: str) -> dict | None:
    for attempt in home.catalog().attempts(run_id, "main"):
        if attempt["outcome"] is None and attempt["pid"]:
            return attempt
    return None
