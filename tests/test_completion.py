"""`nodus --version` and shell completion: the printed script, run by a real bash, completes
commands, options, run ids and keys, and snapshot references from the catalog."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodus import __version__
from nodus.cli.completion import candidates
from nodus.runner.catalog.core import Catalog

NODUS = [sys.executable, "-m", "nodus"]


@pytest.fixture
def home(tmp_path) -> Path:
    """A catalog with one run (key ``nightly``) that committed steps 10 and 20."""
    home = tmp_path / "home"
    catalog = Catalog(str(home))
    run_id = catalog.create_run(
        name="w", workload={}, store="", key="nightly", lock_name="l", stage_names=["main"]
    )
    for step in (10, 20):
        details = {"snapshot": f"ckpt_{step:016x}", "step": step, "reason": "settled"}
        catalog.add_event(run_id, "snapshot_committed", details, stage="main")
    catalog.close()
    return home


def _run_id(home: Path) -> str:
    catalog = Catalog(str(home))
    try:
        return catalog.get_run("nightly").id
    finally:
        catalog.close()


def test_version_prints_the_package_version():
    proc = subprocess.run([*NODUS, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"nodus {__version__}"


def test_commands_subcommands_and_options_complete():
    assert {"run", "runs", "snapshots", "completion"} <= set(candidates(["nodus", ""], 1))
    assert candidates(["nodus", "ru"], 1) == ["run", "runs"]
    assert candidates(["nodus", "runs", "re"], 2) == ["resume"]
    assert candidates(["nodus", "run", "--q"], 2) == ["--quiet"]
    assert candidates(["nodus", "completion", ""], 2) == ["bash", "fish", "zsh"]
    assert candidates(["nodus", "runs", "get", "--home", ""], 4) == []  # a folder: the shell's


def test_run_ids_keys_and_snapshot_references_come_from_the_catalog(home):
    run_id = _run_id(home)
    assert candidates(["nodus", "runs", "get", ""], 3, str(home)) == sorted([run_id, "nightly"])
    assert candidates(["nodus", "--home", str(home), "runs", "wait", "ni"], 5, str(home)) == [
        "nightly"
    ]
    refs = candidates(["nodus", "snapshots", "download", ""], 3, str(home))
    assert refs == sorted(
        [f"{run_id}@10", f"{run_id}@20", "ckpt_000000000000000a", "ckpt_0000000000000014"]
    )
    assert candidates(["nodus", "run", ""], 2, str(home)) == []  # a workload file: the shell's


def test_no_catalog_is_created_by_completing(tmp_path):
    assert candidates(["nodus", "runs", "get", ""], 3, str(tmp_path / "none")) == []
    assert not (tmp_path / "none").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_the_bash_script_completes_in_a_real_shell(home, tmp_path):
    script = subprocess.run(
        [*NODUS, "completion", "bash"], capture_output=True, text=True, timeout=60
    ).stdout
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "nodus").write_text(f'#!/bin/sh\nexec {sys.executable} -m nodus "$@"\n')
    (shim / "nodus").chmod(0o755)
    probe = script + (
        'COMP_WORDS=(nodus runs get ""); COMP_CWORD=3; _nodus_complete; '
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "NODUS_HOME": str(home)}
    proc = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted([_run_id(home), "nightly"])
