"""Fixtures shared by every test area. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# No hub exists here: everything is built locally.
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
}.items():
    os.environ.setdefault(_name, _value)

REPO = Path(__file__).resolve().parents[1]
NODUS = [sys.executable, "-m", "nodus"]


@pytest.fixture
def nodus_home(tmp_path, monkeypatch) -> Path:
    """A private $NODUS_HOME for one test (catalog and default store)."""
    home = tmp_path / "nodus-home"
    home.mkdir()
    monkeypatch.setenv("NODUS_HOME", str(home))
    monkeypatch.delenv("NODUS_STORE", raising=False)
    return home


def run_nodus(*args: str, cwd=None, env=None, timeout: float = 300, check: bool = False):
    """Run the real `nodus` command line in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [*NODUS, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"nodus {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc
