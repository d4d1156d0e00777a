"""A catalog of real runs for the page tests, built once per session through the real runner
with ``programs/curve_counter.py`` (a directory-contract program that logs a loss curve):

- ``recovered``: its program SIGKILLed after a few saves; the runner recovered it, it succeeded
- ``paused``: paused with ``runs pause --checkpoint latest`` while it trained
- ``branched``: ``runs branch recovered@20 --from full-state`` (its loss shifted), finished
- ``failed``: its program exits 1 at step 12

and a ``nodus ui`` serving it (:class:`UiProcess`: the real command, on a free port).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodus.runner.catalog.core import Catalog
from polling import wait_for

PROGRAM = Path(__file__).parent / "programs" / "curve_counter.py"
NODUS = [sys.executable, "-m", "nodus"]
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}
BODY = "[execution]\nkeep_recoverable = 100\n"


@dataclass
class Home:
    """The home of the session's runs, and their ids by role."""

    path: Path
    code: Path
    runs: dict[str, str]

    def env(self) -> dict[str, str]:
        env = dict(os.environ, NODUS_HOME=str(self.path), **FAST)
        env.pop("NODUS_STORE", None)
        return env

    def nodus(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*NODUS, *args],
            cwd=self.code,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*NODUS, *args],
            cwd=self.code,
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def workload(self, name: str, *args: str) -> str:
        command = [sys.executable, str(PROGRAM), *args]
        path = self.code / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n{BODY}'
        )
        return str(path)


def _running(catalog: Catalog, run_id: str) -> dict | None:
    attempts = catalog.attempts(run_id, "main")
    newest = attempts[-1] if attempts else None
    if newest and newest["outcome"] is None and newest["pid"]:
        return newest
    return None


def _committed(catalog: Catalog, run_id: str) -> list[int]:
    return [e["details"]["step"] for e in catalog.events(run_id, types=("snapshot_committed",))]


def _run_id(home: Home, key: str) -> str:
    def found() -> str | None:
        proc = home.nodus("runs", "get", key, "--json")
        return json.loads(proc.stdout)["id"] if proc.returncode == 0 else None

    return wait_for(found, what=f"the run of key {key}")


def _recovered(home: Home) -> str:
    file = home.workload("recovered", "--steps", "40", "--save-every", "5", "--sleep", "0.08")
    runner = home.start("run", file, "--key", "recovered")
    run_id = _run_id(home, "recovered")
    catalog = Catalog(str(home.path))
    wait_for(lambda: any(s >= 15 for s in _committed(catalog, run_id)), what="step 15 saved")
    attempt = wait_for(lambda: _running(catalog, run_id), what="its program")
    os.kill(attempt["pid"], signal.SIGKILL)
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err[-2000:]
    return run_id


def _paused(home: Home) -> str:
    file = home.workload("paused", "--steps", "400", "--save-every", "5", "--sleep", "0.05")
    runner = home.start("run", file, "--key", "paused")
    run_id = _run_id(home, "paused")
    catalog = Catalog(str(home.path))
    wait_for(lambda: any(s >= 10 for s in _committed(catalog, run_id)), what="step 10 saved")
    asked = home.nodus("runs", "pause", run_id, "--checkpoint", "latest")
    assert asked.returncode == 0, asked.stderr
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 3, err[-2000:]
    return run_id


def build_home(root: Path) -> Home:
    home = Home(root / "home", root / "code", {})
    home.code.mkdir(parents=True)
    home.runs["recovered"] = _recovered(home)
    home.runs["paused"] = _paused(home)
    branch = home.nodus(
        "runs",
        "branch",
        "recovered@20",
        "--from",
        "full-state",
        "--name",
        "branched",
        "--set",
        "env.CURVE_SHIFT=0.4",  # its curve lies apart from its parent's on the overlay
        "--json",
    )
    assert branch.returncode == 0, branch.stderr
    home.runs["branched"] = json.loads(branch.stdout)["id"]
    failed = home.nodus("run", home.workload("failed", "--steps", "30", "--fail-at", "12"))
    assert failed.returncode == 1, failed.stderr
    home.runs["failed"] = json.loads(home.nodus("runs", "list", "--json").stdout)[0]["id"]
    aliased = home.nodus("models", "alias", "recovered", "1", "prod")
    assert aliased.returncode == 0, aliased.stderr
    return home


@pytest.fixture(scope="session")
def runs_home(tmp_path_factory) -> Home:
    return build_home(tmp_path_factory.mktemp("ui-runs"))


class UiProcess:
    """``nodus ui --port 0`` on a home, in the background; ``url`` is what it printed."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        full = dict(os.environ, NODUS_HOME=str(home), **(env or {}))
        full.pop("NODUS_STORE", None)
        self.proc = subprocess.Popen(
            [*NODUS, "ui", "--port", "0", *args],
            env=full,
            # as a background job of a non-interactive shell starts it: SIGINT ignored
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "serving" not in line:
            self.proc.kill()
            raise AssertionError(f"nodus ui did not start: {line}{self.proc.stderr.read()}")
        self.url = line.rsplit(" ", 1)[-1].strip()
        self.base = self.url.split("?")[0].rstrip("/")

    def stop(self, signum: int = signal.SIGINT) -> tuple[int, str]:
        self.proc.send_signal(signum)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


def _accepting(base: str) -> bool:
    """Whether the server at ``base`` (``http://host:port``) accepts a connection."""
    address = urllib.parse.urlsplit(base)
    try:
        with socket.create_connection((address.hostname, address.port), timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def ui(runs_home):
    server = UiProcess(runs_home.path)
    wait_for(lambda: _accepting(server.base), what="the ui accepting connections")
    yield server
    server.stop()
