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


def test_each_subcommands_options_complete():
    assert candidates(["nodus", "runs", "wait", "--t"], 3) == ["--timeout"]
    assert candidates(["nodus", "validate", "--j"], 2) == ["--json"]
    assert "--phase" in candidates(["nodus", "runs", "list", "--"], 3)
    assert candidates(["nodus", "snapshots", "pin", "--"], 3) != []


def test_nothing_is_offered_as_an_option_after_a_bare_double_dash(home):
    # past "--" every word is an argument: `nodus runs get -- --x` names a run "--x"
    assert candidates(["nodus", "run", "--", "--d"], 3) == []
    assert candidates(["nodus", "runs", "get", "--", ""], 4, str(home)) == sorted(
        [_run_id(home), "nightly"]
    )


def test_the_line_is_read_as_the_shell_gives_it_a_bare_double_dash_too(capsys):
    from nodus.cli import main

    assert main(["completion", "--complete", "2", "nodus", "run", "--det"]) == 0
    assert capsys.readouterr().out == "--detach\n"
    assert main(["completion", "--complete", "3", "nodus", "run", "--", "--det"]) == 0
    assert capsys.readouterr().out == ""


def _shim(tmp_path: Path) -> Path:
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "nodus").write_text(f'#!/bin/sh\nexec {sys.executable} -m nodus "$@"\n')
    (shim / "nodus").chmod(0o755)
    return shim


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_the_bash_script_completes_options_in_a_real_shell(home, tmp_path):
    script = subprocess.run(
        [*NODUS, "completion", "bash"], capture_output=True, text=True, timeout=60
    ).stdout
    probe = script + (
        "COMP_WORDS=(nodus runs wait --t); COMP_CWORD=3; _nodus_complete; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{_shim(tmp_path)}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["--timeout"]


FISH = shutil.which("fish")


def fish_script(capsys) -> str:
    from nodus.cli import main

    assert main(["completion", "fish"]) == 0
    return capsys.readouterr().out


def test_the_fish_script_asks_nodus_and_falls_back_to_files(capsys):
    script = fish_script(capsys)
    assert script.startswith("function __nodus_complete\n")
    assert "nodus completion --complete" in script and "__fish_complete_path" in script
    assert script.rstrip().endswith("complete -c nodus -f -a '(__nodus_complete)'")
    assert [line.strip() for line in script.splitlines()].count("end") == 2  # if, function


@pytest.mark.skipif(FISH is None, reason="no fish on this machine")
def test_the_fish_script_is_valid_fish(capsys):
    script = fish_script(capsys)
    assert FISH is not None
    checked = subprocess.run([FISH, "--no-execute"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.slow
@pytest.mark.skipif(FISH is None, reason="no fish on this machine")
def test_the_fish_script_completes_in_a_real_shell(home, tmp_path):
    assert FISH is not None
    script = tmp_path / "nodus.fish"
    script.write_text(
        subprocess.run(
            [*NODUS, "completion", "fish"], capture_output=True, text=True, timeout=60
        ).stdout
    )
    env = {
        **os.environ,
        "PATH": f"{_shim(tmp_path)}:{os.environ['PATH']}",
        "NODUS_HOME": str(home),
        "HOME": str(tmp_path),  # no fish configuration of the machine's
    }

    def completed(line: str) -> list[str]:
        probe = f"source {script}; complete -C '{line}'"
        done = subprocess.run([FISH, "-c", probe], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert completed("nodus run --det") == ["--detach"]
    assert completed("nodus runs wa") == ["wait"]
    assert sorted(completed("nodus runs get ")) == sorted([_run_id(home), "nightly"])
    assert completed("nodus run -- --det") == []
