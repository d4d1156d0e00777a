"""One stage program as a supervised process.

The program gets its own process group, so the runner can signal everything it started at once
and a Ctrl-C on the terminal reaches only the runner (which then treats it as a preemption
notice). It also gets a parent-death signal: if the runner dies, even by SIGKILL, the kernel
kills the program, so no orphan keeps writing into a working copy nobody will capture.
PR_SET_PDEATHSIG fires when the *thread* that forked exits, so spawn only from the main thread.

Output is read by a thread, kept verbatim in the attempt's log file and streamed to the runner's
terminal with a ``[stage]`` prefix.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

from nodus import protocol
from nodus.schemas import defaults

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class CannotStartError(Exception):
    """The command could not be started at all (not found, not executable)."""


def _die_with_parent(parent_pid: int):
    """Runs in the child between fork and exec: ask for SIGKILL when the runner goes."""

    def prepare() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the runner died before prctl took effect
            os._exit(1)

    return prepare


class StageProcess:
    """A running stage program: signal its group, poll it, and let its output flow."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        log_path: str,
        prefix: str,
        terminal: IO[str] | None = None,
    ) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.env = env
        self.log_path = log_path
        self.prefix = prefix
        self.terminal = terminal if terminal is not None else sys.stdout
        self.popen: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None
        self.signals_sent: list[int] = []

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self) -> None:
        try:
            self.popen = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        except OSError as error:
            raise CannotStartError(_why_not(self.command[0], error)) from None
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()

    def poll(self) -> int | None:
        assert self.popen is not None
        return self.popen.poll()

    def signal_group(self, signum: int) -> None:
        """Signal every process of the program; remember it so it is never an interruption."""
        self.signals_sent.append(signum)
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit status, or None if still running."""
        assert self.popen is not None
        try:
            return self.popen.wait(timeout=max(timeout, 0))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> int:
        """End the whole group now (SIGKILL) and reap the program."""
        self.signal_group(signal.SIGKILL)
        status = self.wait(defaults.KILL_WAIT_S)
        return status if status is not None else -signal.SIGKILL

    def stop(self, signum: int, grace_s: float) -> int:
        """Send ``signum`` to the group, allow ``grace_s`` seconds, then kill what is left."""
        self.signal_group(signum)
        status = self.wait(grace_s)
        if status is None:
            status = self.kill()
        else:
            self.kill_leftovers()
        return status

    def finish_output(self) -> None:
        """Let the output thread write the program's last lines before the attempt is closed."""
        if self._pump is not None:
            self._pump.join(timeout=5)

    def kill_leftovers(self) -> None:
        """Children the program left behind in its group must not outlive the attempt."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _copy_output(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        with open(self.log_path, "ab") as log:
            for line in iter(self.popen.stdout.readline, b""):
                log.write(line)
                log.flush()
                self._show(line)

    def _show(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace").rstrip("\n")
        try:
            self.terminal.write(f"[{self.prefix}] {text}\n")
            self.terminal.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the log file


def _why_not(program: str, error: OSError) -> str:
    if error.errno == errno.ENOENT:
        return f"command {program!r} cannot start: not found (check `command` and PATH)"
    if error.errno == errno.EACCES:
        return f"command {program!r} cannot start: not executable (check its permissions)"
    return f"command {program!r} cannot start: {error.strerror or error}"


def group_alive(pgid: int) -> bool:
    """True while any process of the group exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_stale_group(pgid: int | None, run_id: str) -> bool:
    """Kill what is left of a dead runner's attempt, but only if it is really that attempt.

    The pid may have been reused since; the group leader's environment names its run, so a
    stranger's process group is never touched.
    """
    if not pgid or not group_alive(pgid):
        return False
    try:
        with open(f"/proc/{pgid}/environ", "rb") as handle:
            environ = handle.read().split(b"\0")
    except OSError:
        return False
    if f"{protocol.ENV_RUN_ID}={run_id}".encode() not in environ:
        return False
    os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + defaults.KILL_WAIT_S
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True
