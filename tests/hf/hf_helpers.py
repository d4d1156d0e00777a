"""Constants and bare runs (no nodus at all) shared by the hf-trainer-v1 tests (``hf_helpers``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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


def quickstart_copy(root: Path, name: str) -> Path:
    """A fresh copy of the quick-start code (without anything an earlier run left in it)."""
    copy = Path(root) / name
    shutil.copytree(
        QUICKSTART, copy, ignore=shutil.ignore_patterns("out", "state", ".nodus", "__pycache__")
    )
    return copy


def bare_run_hash(
    root: Path, program: str = "train.py", env: dict | None = None, launcher: tuple = ()
) -> str:
    """Final weights of ``python PROGRAM`` (or ``LAUNCHER PROGRAM``) in a fresh quick-start
    copy: no nodus, same env."""
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
