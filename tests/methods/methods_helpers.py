"""The managed-method examples under the real runner: a copy of an example, `nodus` processes,
the catalog for attempt pids, the store for snapshots."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from nodus import protocol
from nodus.errors import NotFoundError
from nodus.runner.catalog.core import Catalog
from polling import WAIT_S, wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NODUS = [sys.executable, "-m", "nodus"]
TRAIN = "train"


class Example:
    """A fresh copy of ``examples/<name>`` (its prepare.py run) with a private nodus home."""

    def __init__(
        self, root: Path, name: str, write_delay: str = "0", prepared: Example | None = None
    ) -> None:
        """``prepared``: a copy of the same example whose prepare.py ran, copied with its base
        model and data rather than running prepare.py again (it writes the same files: the
        tests compare runs of copies prepared apart)."""
        self._at(root, name, root / "home", write_delay)
        if prepared is not None:
            shutil.copytree(prepared.code, self.code, ignore=shutil.ignore_patterns(*_RAN))
            return
        shutil.copytree(EXAMPLES / name, self.code, ignore=shutil.ignore_patterns(*_BUILT))
        shutil.copy(EXAMPLES / "tinybase.py", root / "tinybase.py")
        proc = subprocess.run(
            [sys.executable, "prepare.py"], cwd=self.code, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    @classmethod
    def made(cls, root: Path, name: str, home: Path) -> Example:
        """The copy ``root/<name>`` of ``examples/<name>`` something else made and prepared (its
        README block), its runs in ``home``."""
        example = cls.__new__(cls)
        example._at(root, name, home, "0")
        return example

    def _at(self, root: Path, name: str, home: Path, write_delay: str) -> None:
        self.root = root
        self.home = home
        self.code = root / name
        self.write_delay = write_delay
        self.file = self.code / "workload.toml"

    def env(self) -> dict[str, str]:
        env = dict(os.environ, NODUS_HOME=str(self.home))
        env[protocol.ENV_WRITE_DELAY] = self.write_delay
        env.pop("NODUS_STORE", None)
        return env

    def nodus(self, *args: str, timeout: float = WAIT_S) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*NODUS, *args],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen:
        path = self.root / f"nodus-{time.monotonic_ns()}.log"
        with open(path, "w") as log:
            process = subprocess.Popen(
                [*NODUS, *args],
                cwd=self.root,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = path  # type: ignore[attr-defined]
        return process

    def run_id(self, key: str) -> str | None:
        catalog = Catalog(str(self.home))
        try:
            return catalog.get_run(key).id
        except NotFoundError:
            return None
        finally:
            catalog.close()

    def attempts(self, key: str) -> list[dict]:
        run_id = self.run_id(key)
        if run_id is None:
            return []
        catalog = Catalog(str(self.home))
        try:
            return catalog.attempts(run_id, TRAIN)
        finally:
            catalog.close()

    def kill_after_save(self, key: str, number: int, step: int, runner) -> None:
        """SIGKILL train attempt ``number`` once its save of ``step`` is published."""

        def running() -> dict | None:
            attempts = self.attempts(key)
            newest = attempts[-1] if attempts else None
            if newest and newest["number"] == number and newest["pid"]:
                return newest
            return None

        attempt = wait_for(running, f"train attempt {number}", runner)
        copy = self.home / "work" / self.run_id(key) / TRAIN / "copy" / protocol.CONTROL_DIR
        record = protocol.ControlPaths(str(copy)).save_record(step)
        wait_for(lambda: os.path.exists(record), f"attempt {number} saving {step}", runner)
        os.kill(attempt["pid"], signal.SIGKILL)

    def outputs(self, key: str) -> Path:
        target = self.root / f"outputs-{key}"
        if not target.exists():
            proc = self.nodus("runs", "outputs", key, "--to", str(target))
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return target

    def get(self, key: str) -> dict:
        proc = self.nodus("runs", "get", key, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def train_snapshots(self, key: str) -> list[dict]:
        """The run's snapshots of its train stage, as `nodus runs snapshots --json` lists them."""
        listing = self.nodus("runs", "snapshots", key, "--json")
        assert listing.returncode == 0, listing.stderr
        return [s for s in json.loads(listing.stdout) if s["stage"] == TRAIN]


_RAN = ("out", "state", ".nodus", "__pycache__")
_BUILT = ("base", "data", *_RAN)


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def adapter_hash(outputs: Path) -> str:
    """The final adapter the train stage left in ``trained/``, as a user downloads it."""
    return file_hash(outputs / protocol.METHOD_TRAINED_DIR / "adapter_model.safetensors")
