"""The supervisor's pre-forked child: the program it becomes, and the starts that fail.

Real forks, real ``exec``\\ s and real signals; the supervisor forks this child while it waits
for its start request (nodus.runner.processes.prefork).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from nodus.runner.processes.prefork import Prefork
from polling import wait_for

REPORT = (
    "import os, sys; "
    "print(os.getpid(), os.getsid(0), os.getcwd(), os.environ['MARK'], sys.stdin.read() == '')"
)


def test_the_program_takes_the_childs_pid_session_folder_and_environment(tmp_path):
    out = tmp_path / "out.txt"
    ready = Prefork()
    ready.exec(
        [sys.executable, "-c", _writing(out, REPORT)],
        str(tmp_path),
        {"MARK": "seen", "PATH": os.environ["PATH"]},
    )
    _, raw = os.waitpid(ready.pid, 0)
    assert os.waitstatus_to_exitcode(raw) == 0
    pid, sid, cwd, mark, stdin_empty = out.read_text().split()
    assert int(pid) == ready.pid  # the program is the child: the supervisor's pid for it holds
    assert int(sid) == ready.pid  # its own session, so its group bears its pid
    assert cwd == str(tmp_path) and mark == "seen" and stdin_empty == "True"


def _writing(out, code: str) -> str:
    return textwrap.dedent(
        f"""
        import contextlib, io
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec({code!r})
        open({str(out)!r}, "w").write(buffer.getvalue())
        """
    )


def test_a_command_is_looked_up_on_the_programs_own_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "my-trainer"
    tool.write_text(f"#!/bin/sh\necho found > {tmp_path / 'ran'}\n")
    tool.chmod(0o755)
    ready = Prefork()
    ready.exec(["my-trainer"], str(tmp_path), {"PATH": f"/nonexistent:{bin_dir}"})
    os.waitpid(ready.pid, 0)
    assert (tmp_path / "ran").read_text() == "found\n"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda tmp: (["no-such-trainer-anywhere"], str(tmp)), errno.ENOENT),
        (lambda tmp: ([_plain_file(tmp)], str(tmp)), errno.EACCES),
        (lambda tmp: (["/bin/true"], str(tmp / "missing")), errno.ENOENT),
    ],
    ids=["not found", "not executable", "no such folder"],
)
def test_a_start_that_cannot_run_says_why_and_leaves_no_child(tmp_path, make, expected):
    command, cwd = make(tmp_path)
    ready = Prefork()
    with pytest.raises(OSError) as raised:
        ready.exec(command, cwd, {"PATH": os.environ["PATH"]})
    assert raised.value.errno == expected
    with pytest.raises(ChildProcessError):
        os.waitpid(ready.pid, os.WNOHANG)  # reaped: nothing is left behind


def _plain_file(tmp) -> str:
    path = tmp / "train.sh"
    path.write_text("echo never\n")
    path.chmod(0o644)
    return str(path)


def test_a_discarded_child_exits_and_is_reaped():
    ready = Prefork()
    ready.discard()
    with pytest.raises(ChildProcessError):
        os.waitpid(ready.pid, os.WNOHANG)


@pytest.mark.slow  # a real SIGKILL of a real parent
def test_the_program_dies_with_the_process_that_forked_it(tmp_path):
    """The parent-death signal Popen's preexec_fn used to set: a program never outlives the
    supervisor that started it, even when the supervisor is SIGKILLed."""
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import os, sys, time
                from nodus.runner.processes.prefork import Prefork
                ready = Prefork()
                ready.exec(["sleep", "600"], "/", {{"PATH": os.environ["PATH"]}})
                open({str(pid_file)!r}, "w").write(str(ready.pid))
                time.sleep(600)
                """
            ),
        ]
    )
    try:
        program = _wait_for_pid(pid_file)
        assert _alive(program)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_for(lambda: not _alive(program), what="the program gone with its parent", timeout=10)
    finally:
        parent.kill()
        parent.wait()


def _wait_for_pid(path) -> int:
    text = wait_for(
        lambda: path.exists() and path.read_text(), what="the program's pid file", timeout=30
    )
    return int(text)


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
