"""What a command imports: `nodus validate`, `nodus runs list` and `nodus run` stay light.

Their answer time is measured in benchmarks/startup.py, never asserted here; what keeps it is
that nothing heavy is imported on their way: no ML framework, no fsspec for a local store, no
pydantic to list runs, no store or runner to validate a file.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

# Outside the quick tier: each test starts the real `nodus` command line, some a whole run.
pytestmark = pytest.mark.slow

WORKLOAD = 'name = "light"\ncommand = ["{python}", "train.py"]\ncontinuity = "restartable"\n'

# Imported inside a fresh interpreter, so nothing this test process loaded counts.
PROBE = """
import contextlib, io, json, sys
from nodus.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""

FRAMEWORKS = {"torch", "transformers", "accelerate", "datasets", "numpy"}


def imported(folder, home, *argv: str) -> tuple[int, set[str]]:
    env = {**os.environ, "NODUS_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["status"], {name.split(".")[0] for name in answer["modules"]} | set(
        answer["modules"]
    )


@pytest.fixture
def folder(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text('print("hello")\n')
    (code / "nodus.toml").write_text(WORKLOAD.format(python=sys.executable))
    return code


def test_validate_imports_neither_the_store_nor_the_runner(folder, tmp_path):
    status, modules = imported(folder, tmp_path / "home", "validate", "nodus.toml")
    assert status == 0
    heavy = FRAMEWORKS | {"fsspec", "nodus.store", "nodus.runner", "sqlite3"}
    assert sorted(modules & heavy) == []


def test_runs_list_imports_no_pydantic(folder, tmp_path):
    status, modules = imported(folder, tmp_path / "home", "runs", "list")
    assert status == 0
    assert sorted(modules & (FRAMEWORKS | {"pydantic", "fsspec", "nodus.schemas.models"})) == []


def test_a_run_on_a_local_store_imports_no_fsspec_and_no_framework(folder, tmp_path):
    status, modules = imported(folder, tmp_path / "home", "run", "nodus.toml")
    assert status == 0
    assert sorted(modules & (FRAMEWORKS | {"fsspec", "filelock", "asyncio"})) == []
    assert "nodus.runner.attempt.pausing" not in modules  # loaded when a pause is carried out


def test_a_workload_run_again_unchanged_is_not_checked_again(folder, tmp_path):
    """The resolution is remembered (nodus.schemas.remembered): no pydantic the second time."""
    status, modules = imported(folder, tmp_path / "home", "run", "nodus.toml")
    assert status == 0 and "pydantic" in modules
    status, modules = imported(folder, tmp_path / "home", "run", "nodus.toml")
    assert status == 0
    assert sorted(modules & {"pydantic", "nodus.schemas.models"}) == []


def test_an_edited_workload_is_checked_again(folder, tmp_path):
    home = tmp_path / "home"
    assert imported(folder, home, "run", "nodus.toml")[0] == 0
    text = (folder / "nodus.toml").read_text()
    (folder / "nodus.toml").write_text(text + "max_recovries = 3\n")
    refused = _nodus(folder, home, "run", "nodus.toml")
    assert refused.returncode == 2
    assert "max_recovries" in refused.stderr and "Traceback" not in refused.stderr


def test_a_remembered_workload_whose_code_folder_is_gone_is_refused(folder, tmp_path):
    (folder / "src").mkdir()
    (folder / "src" / "train.py").write_text('print("hello")\n')
    workload = WORKLOAD.format(python=sys.executable) + 'code = "src"\n'
    (folder / "nodus.toml").write_text(workload)
    home = tmp_path / "home"
    assert imported(folder, home, "run", "nodus.toml")[0] == 0
    (folder / "src" / "train.py").unlink()
    (folder / "src").rmdir()
    refused = _nodus(folder, home, "run", "nodus.toml")
    assert refused.returncode == 2
    assert "the code folder does not exist" in refused.stderr


def _nodus(folder, home, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NODUS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "nodus", *argv], cwd=folder, env=env, capture_output=True, text=True
    )


def test_an_attempts_supervisor_imports_only_what_is_built_in_or_light():
    """Every attempt's program waits for its supervisor's interpreter: it boots as the runner
    boots it (``-I -S``) and imports no module that builds enums, dataclasses or regular
    expressions at import (docs/benchmarks.md, "Start-up")."""
    from nodus.runner.processes import stage_process

    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        f"import {stage_process.SUPERVISOR_MODULE}; print(sorted(sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, stage_process._PACKAGE_ROOT],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = set(ast.literal_eval(done.stdout))
    assert stage_process.SUPERVISOR_MODULE in modules
    heavy = {"typing", "enum", "re", "json", "socket", "signal", "contextlib", "dataclasses"}
    assert sorted(modules & (heavy | {"subprocess", "threading", "logging"})) == []


def test_the_installed_command_leaves_as_python_m_nodus_does():
    """The console script cron and systemd run is ``nodus.cli.run``, as ``python -m nodus`` is:
    after a run, it leaves without the interpreter's teardown (tens of milliseconds)."""
    from importlib.metadata import entry_points

    from nodus import cli

    (script,) = entry_points(group="console_scripts", name="nodus")
    assert script.load() is cli.run
