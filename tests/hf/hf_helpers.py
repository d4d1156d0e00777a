"""Constants and bare runs (no nodus at all) shared by the hf-trainer-v1 tests (``hf_helpers``)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nodus.qualify import weights_hash
from polling import WAIT_S

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
PROGRAMS = Path(__file__).resolve().parent / "programs"
# The quick-start as the tests run it: 12 optimizer steps per epoch, 4 epochs, seed 42.
PROGRAM_ENV = {
    "WANDB_MODE": "disabled",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "QUICKSTART_EPOCHS": "4",
    "QUICKSTART_SEED": "42",
}
SAVE_EVERY = 5  # with 12 steps per epoch: saves inside epochs and at boundaries 12, 24, 36, 48
PREPARED = "prepared"  # the key of the session's uninterrupted run (conftest.prepared)
# Where bare runs' results are kept for the session, shared by xdist's workers (set by
# tests/hf/conftest.py; None: every call trains again). A bare run is deterministic (the tests
# assert exactly that), so a second identical one could only repeat the first one's result.
SHARED_RESULTS: Path | None = None


def quickstart_copy(root: Path, name: str) -> Path:
    """A fresh copy of the quick-start code (without anything an earlier run left in it)."""
    copy = Path(root) / name
    shutil.copytree(
        QUICKSTART, copy, ignore=shutil.ignore_patterns("out", "state", ".nodus", "__pycache__")
    )
    return copy


def shared_results_folder(tmp_path_factory: Any) -> Path:
    """Where bare runs' results are kept for the session: in its base folder, which xdist's
    workers share (each worker's own base folder is inside it)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return Path(shared) / "bare-runs"


def once_per_session(key: list, compute: Callable[[], Any]) -> Any:
    """``compute()`` (a JSON value) for ``key``, computed once per session for all workers."""
    if SHARED_RESULTS is None:
        return compute()
    name = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
    SHARED_RESULTS.mkdir(parents=True, exist_ok=True)
    known = SHARED_RESULTS / f"{name}.json"
    with open(SHARED_RESULTS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for the same run, not twice
        if not known.exists():
            known.write_text(json.dumps(compute()))
        return json.loads(known.read_text())


def bare_run_hash(
    root: Path, program: str = "train.py", env: dict | None = None, launcher: tuple = ()
) -> str:
    """Final weights of ``python PROGRAM`` (or ``LAUNCHER PROGRAM``) in a fresh quick-start
    copy: no nodus, same env. Trained once per session for each program, env and launcher."""
    key = ["bare", program, sorted((env or {}).items()), list(launcher)]
    return once_per_session(key, lambda: _bare_run_hash(root, program, env, launcher))


def _bare_run_hash(root: Path, program: str, env: dict | None, launcher: tuple) -> str:
    copy = quickstart_copy(Path(tempfile.mkdtemp(prefix="bare-", dir=root)), "code")
    proc = subprocess.run(
        [*launcher, program] if launcher else [sys.executable, program],
        cwd=copy,
        capture_output=True,
        text=True,
        env={**os.environ, **PROGRAM_ENV, **(env or {})},  # env may change PROGRAM_ENV's
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return weights_hash(str(copy / "out" / "model"))
