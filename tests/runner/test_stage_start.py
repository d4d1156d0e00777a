"""A stage program's start under its attempt's supervisor: what the program gets, and the
starts that fail (nodus.runner.processes.stage_process, supervisor).

Real supervisors, real programs and real signals: the attempt spawns its supervisor when it
launches, and the supervisor starts the program on the start request.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import sys

import pytest
from runner_helpers import pid_alive, token_carriers

from nodus.runner.processes.stage_process import CannotStartError, StageProcess
from polling import wait_for


def _run_id(tmp_path) -> str:
    """A run id of the test's own: the other workers start supervisors meanwhile, and a token
    shared with theirs would count their supervisors as this test's leftovers."""
    return "run_" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]


def _token(tmp_path) -> str:
    return f"{_run_id(tmp_path)}/main/1"


REPORT = (
    "import os, sys; "
    "print(os.getpid(), os.getsid(0), os.getcwd(), os.environ['MARK'], sys.stdin.read() == '',"
    " os.environ['NODUS_ATTEMPT_TOKEN'])"
)


def _process(tmp_path, command: list[str], cwd: str, env: dict[str, str]) -> StageProcess:
    return StageProcess(
        command,
        cwd=cwd,
        env=env,
        log_path=str(tmp_path / "output.log"),
        prefix="main",
        token=_token(tmp_path),
        grace_s=1,
        terminal=io.StringIO(),
    )


def test_the_program_runs_in_its_own_session_with_its_folder_environment_and_token(tmp_path):
    process = _process(
        tmp_path,
        [sys.executable, "-c", REPORT],
        str(tmp_path),
        {"MARK": "seen", "PATH": os.environ["PATH"]},
    )
    process.start()
    assert process.wait(60) == 0
    process.finish_output()
    pid, sid, cwd, mark, stdin_empty, token = (tmp_path / "output.log").read_text().split()
    assert int(pid) == process.pid  # the catalog's attempts.pid is the program's own
    assert int(sid) == process.pid  # its own session, so its group bears its pid
    assert cwd == str(tmp_path) and mark == "seen" and stdin_empty == "True"
    assert token == _token(tmp_path)
    # the supervisor reaped too
    assert process.tree_gone and token_carriers(_run_id(tmp_path)) == {}


def test_a_command_is_looked_up_on_the_programs_own_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "my-trainer"
    tool.write_text(f"#!/bin/sh\necho found > {tmp_path / 'ran'}\n")
    tool.chmod(0o755)
    process = _process(tmp_path, ["my-trainer"], str(tmp_path), {"PATH": f"/nonexistent:{bin_dir}"})
    process.start()
    assert process.wait(60) == 0
    assert (tmp_path / "ran").read_text() == "found\n"


def _plain_file(tmp) -> str:
    path = tmp / "train.sh"
    path.write_text("echo never\n")
    path.chmod(0o644)
    return str(path)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: (["no-such-trainer-anywhere"], str(tmp)), "not found"),
        (lambda tmp: ([_plain_file(tmp)], str(tmp)), "not executable"),
        (lambda tmp: (["/bin/true"], str(tmp / "missing")), "not found"),
    ],
    ids=["not found", "not executable", "no such folder"],
)
def test_a_start_that_cannot_run_says_why_and_leaves_nothing(tmp_path, make, expected):
    command, cwd = make(tmp_path)
    process = _process(tmp_path, command, cwd, {"PATH": os.environ["PATH"]})
    with pytest.raises(CannotStartError) as raised:
        process.start()
    assert f"command {command[0]!r} cannot start: {expected}" in str(raised.value)
    # its supervisor is gone (reaped), and started nothing
    assert token_carriers(_run_id(tmp_path)) == {}


@pytest.mark.slow  # a real SIGKILL of a real supervisor
def test_the_program_dies_with_its_supervisor(tmp_path):
    """The program's parent-death signal: it never outlives the supervisor that started it,
    even when the supervisor is SIGKILLed."""
    process = _process(tmp_path, ["sleep", "600"], "/", {"PATH": os.environ["PATH"]})
    process.start()
    assert pid_alive(process.pid)
    assert process.supervisor is not None
    os.kill(process.supervisor.pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(process.pid), "the program to die with its supervisor")
    assert process.wait(60) == -signal.SIGKILL  # the runner sees its supervisor lost
    assert process.supervisor_lost == "killed by SIGKILL"
