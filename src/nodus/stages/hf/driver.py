"""A minimal runner side of the protocol, for ``nodus qualify`` and the integration's tests.

It does what the runner does around one stage program, with real processes and real files: a
fresh working copy per attempt, ``integration.json``, the bootstrap on ``PYTHONPATH``, save
requests, commits, SIGKILL at chosen moments, and a "restore" that lays one published checkpoint
into the next attempt's fresh copy. It is not the runner: no catalog, no store, no supervision.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from nodus._atomic import write_json_atomic
from nodus.schemas import defaults
from nodus.stages.hf import BOOTSTRAP_DIR
from nodus.stages.hf.writer import checkpoint_name


@dataclass
class Attempt:
    copy: str
    process: subprocess.Popen
    log_path: str
    requests: int = field(default=0)

    @property
    def control(self) -> str:
        return os.path.join(self.copy, defaults.PRIVATE_DIR)

    @property
    def state(self) -> str:
        return os.path.join(self.copy, defaults.STATE_DIR)

    def recorded_steps(self) -> list[int]:
        try:
            names = os.listdir(os.path.join(self.control, "saves"))
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def record(self, step: int) -> dict:
        with open(os.path.join(self.control, "saves", f"{step}.json"), encoding="utf-8") as fh:
            return json.load(fh)

    def events(self) -> list[dict]:
        folder = os.path.join(self.control, "events")
        if not os.path.isdir(folder):
            return []
        out = []
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    out.append(json.load(fh))
        return out

    def request(self, then: str = "continue") -> int:
        """Ask for a save at the next boundary, the way the runner does (temp + rename)."""
        self.requests += 1
        folder = os.path.join(self.control, "requests")
        os.makedirs(folder, exist_ok=True)
        write_json_atomic(
            os.path.join(folder, f"{self.requests}.json"), {"id": self.requests, "then": then}
        )
        return self.requests

    def commit(self, step: int) -> None:
        write_json_atomic(
            os.path.join(self.control, "committed.json"),
            {"step": step, "snapshot": f"ckpt_qualify{step}"},
        )

    def wait_until(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None and not condition():
                raise RuntimeError(
                    f"the program exited ({self.process.returncode}) before {what}:"
                    f"\n{self.log()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} after {timeout:.0f} s:\n{self.log()[-3000:]}")
            time.sleep(0.01)

    def wait_for_save(self, step: int, timeout: float = 120) -> None:
        self.wait_until(lambda: step in self.recorded_steps(), timeout, f"save record {step}")

    def saving_now(self) -> bool:
        """A checkpoint folder is being built under .nodus/tmp (not yet published)."""
        folder = os.path.join(self.control, "tmp")
        return os.path.isdir(folder) and any(
            n.startswith("checkpoint-") for n in os.listdir(folder)
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """What a crash or an OOM kill does: the whole process group, no warning."""
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
        self.process.wait()

    def finish(self, timeout: float = 300) -> int:
        return self.process.wait(timeout=timeout)

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def new_copy(source: str, root: str, name: str) -> str:
    """A fresh working copy of the source (what the runner builds for every attempt)."""
    copy = os.path.join(root, name)
    shutil.copytree(
        source,
        copy,
        ignore=shutil.ignore_patterns(
            "out", defaults.STATE_DIR, defaults.PRIVATE_DIR, "__pycache__"
        ),
    )
    os.makedirs(os.path.join(copy, defaults.STATE_DIR))
    os.makedirs(os.path.join(copy, defaults.PRIVATE_DIR))
    return copy


def restore(attempt: Attempt, step: int, copy: str) -> None:
    """Lay the published ``checkpoint-<step>`` of a finished attempt over a fresh copy."""
    name = checkpoint_name(step)
    shutil.copytree(os.path.join(attempt.state, name), os.path.join(copy, defaults.STATE_DIR, name))


def start(
    copy: str,
    command: list[str],
    integration: str | None,
    *,
    save_every: int = 0,
    save_each_epoch: bool = False,
    restored_step: int | None = None,
    home: str = "",
    env: dict[str, str] | None = None,
    qualifying: bool = False,
) -> Attempt:
    control = os.path.join(copy, defaults.PRIVATE_DIR)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.update(
        {
            "NODUS_CHECKPOINT_DIR": os.path.join(copy, defaults.STATE_DIR),
            "NODUS_CONTROL_DIR": control,
            "PYTHONUNBUFFERED": "1",
        }
    )
    if integration:
        write_json_atomic(
            os.path.join(control, "integration.json"),
            {
                "integration": integration,
                "save_every": save_every,
                "save_each_epoch": save_each_epoch,
                "restored_step": restored_step,
                "run_id": "run_local",
                "stage": "main",
                "attempt": 1,
                "home": home,
                **({"qualifying": True} if qualifying else {}),
            },
        )
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (BOOTSTRAP_DIR, full_env.get("PYTHONPATH")) if p
        )
    log_path = os.path.join(os.path.dirname(copy), os.path.basename(copy) + ".log")
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            cwd=copy,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Attempt(copy=copy, process=process, log_path=log_path)


def weights_hash(model_dir: str) -> str:
    """Hash of every tensor (name, dtype, shape, bytes) in a saved model folder."""
    from safetensors.numpy import load_file

    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(tensors):
        value = tensors[name]
        digest.update(f"{name}:{value.dtype}:{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def python() -> str:
    return sys.executable
