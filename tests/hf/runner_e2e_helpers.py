"""The quick-start program under the real runner: workload files, `nodus` processes, observations.

Everything here goes through what a user has: a workload file, the `nodus` command line as a
subprocess, the run catalog and the store under a private ``$NODUS_HOME``, real signals. The test
reads the catalog (attempt pids, restored steps) and the store (committed snapshots) directly,
because polling them through a fresh `nodus` process per look would cost a second each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import tomli_w
from hf_helpers import PROGRAM_ENV, PROGRAMS, quickstart_copy

from nodus import protocol
from nodus.errors import NotFoundError
from nodus.qualify import weights_hash
from nodus.runner.catalog.core import Catalog
from polling import WAIT_S, wait_for

NODUS = [sys.executable, "-m", "nodus"]
STAGE = "main"
SAVE_EVERY = 6  # the quick-start's setting: 12 steps per epoch, saves inside and at epoch ends
STEPS = 48
# Each save waits this long before it is published, and a save that comes due meanwhile waits
# for it: training crawls from save to save, so kills land at chosen steps and a save is in
# progress for a whole second at a time. It never changes what is trained. A workload's env may
# not name NODUS_* variables, so it reaches the program through the runner's environment.
WRITE_DELAY_S = "1.0"
# Seconds a stopping program gets to answer the stop request: a stop save here takes about two
# write delays, and a short grace keeps a missed answer from stalling the tests for a minute.
GRACE_S = 15


class Project:
    """A copy of the quick-start code, a workload file for it and a private nodus home."""

    def __init__(
        self,
        root: Path,
        *,
        program: str = "train.py",
        env: dict | None = None,
        write_delay: str = WRITE_DELAY_S,
        integration: str = protocol.INTEGRATION_HF_TRAINER_V1,
        save_every: int | str = SAVE_EVERY,
        resume_on_interruption: bool = True,
        launcher: tuple[str, ...] = (),
        keep_recoverable: int = 100,  # recovery tests look at every save; retention's own tests
        keep_adapters: int = 100,  # (test_hf_retention) set these
        execution: dict | None = None,  # more [execution] keys, replacing these
    ) -> None:
        self.root = root
        self.write_delay = write_delay
        self.home = root / "home"
        self.file = root / "workload.toml"
        self.code = quickstart_copy(root, "code")
        if program != "train.py":
            shutil.copy(PROGRAMS / program, self.code / program)
        workload = {
            "name": "quickstart-e2e",
            "code": "code",
            # a launcher (torchrun, accelerate launch) is given the program as its last word
            "command": [*launcher, program] if launcher else [sys.executable, program],
            "integration": integration,
            "outputs": ["out/model"],
            # unbuffered: the log shows every step the program reached, even when it is killed
            "env": {**PROGRAM_ENV, "PYTHONUNBUFFERED": "1", **(env or {})},
            "continuity": {
                "mode": "checkpointed",
                "resume_on_interruption": resume_on_interruption,
                "checkpoint_paths": ["state"],
            },
            "execution": {
                "save_every": save_every,
                "save_each_epoch": True,
                "keep_recoverable": keep_recoverable,
                "keep_adapters": keep_adapters,
                "max_recoveries": 10,
                "grace_period": GRACE_S,
                **(execution or {}),
            },
        }
        if not resume_on_interruption:  # without automatic recovery the limit would do nothing
            del workload["execution"]["max_recoveries"]  # and is refused
        self.file.write_text(tomli_w.dumps(workload))

    # --- the command line -------------------------------------------------------------------

    def env(self, extra: dict | None = None) -> dict[str, str]:
        env = dict(os.environ, NODUS_HOME=str(self.home))
        env[protocol.ENV_WRITE_DELAY] = self.write_delay
        env.pop("NODUS_STORE", None)
        return {**env, **(extra or {})}

    def start(self, *args: str) -> subprocess.Popen:
        """`nodus ARGS` in the background, in its own session so a signal reaches only it."""
        path = self.root / f"nodus-{args[0]}-{time.monotonic_ns()}.log"
        with open(path, "w") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [*NODUS, *args],
                cwd=self.root,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = path  # type: ignore[attr-defined]  (read by wait_for on failure)
        return process

    def nodus(
        self, *args: str, timeout: float = WAIT_S, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        """`nodus ARGS`; ``env`` is added to the runner's environment (which programs inherit)."""
        return subprocess.run(
            [*NODUS, *args],
            cwd=self.root,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def get(self, run: str) -> dict:
        """`nodus runs get RUN --json`: the documented view of a run."""
        proc = self.nodus("runs", "get", run, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def outputs_hash(self, run: str) -> str:
        """Hash of out/model/model.safetensors as `nodus runs outputs` hands it to a user."""
        target = self.root / f"outputs-{run}"
        proc = self.nodus("runs", "outputs", run, "--to", str(target))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return weights_hash(str(target / "out" / "model"))

    # --- observing a run --------------------------------------------------------------------

    def attempts(self, run: str) -> list[dict]:
        """The catalog's attempts of the stage, with the program pid `runs get` leaves out."""
        run_id = self.get_id(run)
        if run_id is None:
            return []
        catalog = Catalog(str(self.home))
        try:
            return catalog.attempts(run_id, STAGE)
        finally:
            catalog.close()

    def snapshots(self, run: str) -> list:
        """Committed checkpoint manifests of the run, oldest first."""
        from nodus.store import open_store

        run_id = self.get_id(run)
        if run_id is None:
            return []
        return open_store("file://" + str(self.home / "store")).list(run=run_id, stage=STAGE)

    def get_id(self, run: str) -> str | None:
        """The run id behind an id or key; None until the runner has accepted the run."""
        catalog = Catalog(str(self.home))
        try:
            return catalog.get_run(run).id
        except NotFoundError:
            return None
        finally:
            catalog.close()

    def committed_steps(self, run: str, attempt: int | None = None) -> list[int]:
        return sorted(
            m.step for m in self.snapshots(run) if attempt is None or m.attempt == attempt
        )

    def running(self, run: str, number: int | None = None) -> dict | None:
        """The newest attempt while its program lives (optionally only attempt ``number``)."""
        attempts = self.attempts(run)
        newest = attempts[-1] if attempts else None
        if (
            newest
            and newest["outcome"] is None
            and newest["pid"]
            and pid_alive(newest["pid"])
            and number in (None, newest["number"])
        ):
            return newest
        return None

    def copy_of(self, run: str, number: int) -> Path:
        """The stage's working copy: attempt ``number``'s while it runs (and until the next)."""
        return self.home / "work" / self.get_id(run) / STAGE / "copy"

    def control(self, run: str, number: int) -> protocol.ControlPaths:
        """The control folder of attempt ``number``, as the protocol names its files."""
        return protocol.ControlPaths(str(self.copy_of(run, number) / protocol.CONTROL_DIR))

    def log_of(self, attempt: dict) -> str:
        return Path(attempt["log_path"]).read_text(errors="replace")

    def saving(self, run: str, number: int) -> int | None:
        """The step whose checkpoint attempt ``number`` is building right now, if any."""
        try:
            names = os.listdir(self.control(run, number).build)
        except FileNotFoundError:
            return None
        steps = [s for s in map(protocol.building_step, names) if s is not None]
        return max(steps) if steps else None

    def kill_after_save(self, run: str, number: int, step: int, runner) -> None:
        """SIGKILL attempt ``number``'s program as soon as its save of ``step`` is published.

        The runner commits that save on its way out (the program's exit triggers a capture), so
        with saves paced by the write delay the recovery resumes from exactly ``step``.
        """
        attempt = wait_for(lambda: self.running(run, number), f"attempt {number}", runner)
        record = self.control(run, number).save_record(step)
        wait_for(lambda: os.path.exists(record), f"attempt {number} saving step {step}", runner)
        kill_program(attempt)


# --- waiting, killing, the reference run ------------------------------------------------------


def kill_program(attempt: dict) -> None:
    """What an OOM kill or a crash does to the stage program: SIGKILL, no warning."""
    os.kill(attempt["pid"], signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    try:  # a zombie counts as dead: its runner has not reaped it yet
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def steps_logged(log: str) -> int:
    """Optimizer steps an attempt trained: the Trainer logs one ``{'loss': …}`` line per step."""
    return sum(1 for line in log.splitlines() if "{'loss':" in line)
