"""One stage program, run under its attempt's supervisor, as the runner sees it.

The runner never parents the program itself: it starts a small supervisor
(:mod:`.supervisor`, spawned from the main thread) that is the program's parent,
holds the whole tree the program starts and ends it with the attempt, or with the runner if the
runner dies. Both carry the attempt's token (:mod:`.containment`). The program gets
its own process group; the runner's stop requests are forwarded to it, and a Ctrl-C on the
terminal reaches only the runner (which then treats it as a preemption notice).

Output is read by a thread, kept verbatim in the attempt's log file and streamed to the runner's
terminal with a ``[stage]`` prefix, each line as a terminal would show it
(:func:`nodus.stages.terminal.collapse`).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from nodus._atomic import create_private
from nodus.runner.processes.containment import KILL_WAIT_S, TOKEN_VAR, Survivor, kill_carriers
from nodus.runner.processes.messages import (
    CANNOT_START,
    ENDED,
    KILL,
    SIGNAL,
    START,
    STARTED,
    CannotStart,
    Channel,
    Ending,
    Loss,
    Start,
)
from nodus.stages.terminal import collapse

SUPERVISOR_MODULE = "nodus.runner.processes.supervisor"

# The supervisor's interpreter is isolated and skips ``site`` (``-I -S``): it needs the standard
# library and this package only, found where this one was found, never a module of the folder
# it runs in (a project's ``signal.py``), and ``site`` (the virtual environment's .pth files)
# costs every attempt's start a few ms more.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    f"from {SUPERVISOR_MODULE} import boot; boot(sys.argv[2:])"
)


class CannotStartError(Exception):
    """The command could not be started at all (not found, not executable)."""


class Supervisor:
    """An attempt's supervisor process, started with no program yet, and the runner's socket
    to it; one whose socket closes before a start request exits without starting anything."""

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.process = process
        self.sock = sock
        self.taken = False  # handed a start request: the StageProcess owns it from then on

    def discard(self) -> None:
        """End a supervisor no program was started under: its channel closes, so it exits as
        soon as its interpreter is up (:func:`.supervisor.main`), and it is reaped."""
        if self.taken:
            return
        self.taken = True
        self.sock.close()
        reap_supervisor(self.process)
        if self.process.stdout is not None:
            self.process.stdout.close()


def spawn_supervisor(token: str) -> Supervisor:
    """Start an attempt's supervisor (from the main thread); CannotStartError if it cannot."""
    ours, theirs = socket.socketpair()
    try:
        # No preexec_fn, so Popen can vfork: a fork of the runner costs it 4-15 ms. The
        # supervisor asks for its parent-death signal itself, naming the runner to check.
        process = subprocess.Popen(
            [
                *(sys.executable, "-I", "-S", "-c", _BOOT, _PACKAGE_ROOT),
                *(str(theirs.fileno()), str(os.getpid())),
            ],
            env={**os.environ, TOKEN_VAR: token},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
    except OSError as error:
        ours.close()
        raise CannotStartError(f"the attempt's supervisor cannot start: {error}") from None
    finally:
        theirs.close()
    return Supervisor(process, ours)


class StageProcess:
    """A running stage program: signal it, poll it, end its tree, and let its output flow."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: str,
        env: dict[str, str],
        log_path: str,
        prefix: str,
        token: str,
        grace_s: float,
        terminal: IO[str] | None = None,
    ) -> None:
        self.command = list(command)
        self.cwd = cwd
        self.env = {**env, TOKEN_VAR: token}
        self.token = token
        self.grace_s = grace_s
        self.log_path = log_path
        self.prefix = prefix
        self.terminal = terminal if terminal is not None else sys.stdout
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.channel: Channel | None = None
        self.pid = 0  # the program's own pid (the catalog's attempts.pid)
        self.ending: Ending | None = None  # set once the program and its whole tree are gone
        self.survivors: list[Survivor] = []  # left by a supervisor that died: killed by token
        self.supervisor_lost: str | None = None  # how the supervisor died, if it did
        self.signals_sent: list[int] = []
        self._pump: threading.Thread | None = None
        # Lines of output so far and when the last arrived (monotonic): progress (hang_timeout).
        self.output_lines = 0
        self.output_at: float | None = None

    def start(self, supervisor: Supervisor | None = None) -> None:
        """Start the program under ``supervisor`` (the attempt's, spawned while its copy was
        laid out), else under one spawned now; CannotStartError if either cannot start (the
        command not found, not executable, ...)."""
        reply = self._start_on(supervisor or spawn_supervisor(self.token))
        if reply is not None:
            raise CannotStartError(self._why_not(reply))

    def _start_on(self, supervisor: Supervisor) -> dict[str, Any] | None:
        """Ask ``supervisor`` to start the program: None once it runs, else the reply (``{}``
        for none: the supervisor is gone, and is ended). The supervisor is waited for however
        long its interpreter takes to start."""
        supervisor.taken = True
        self.supervisor = supervisor.process
        self.channel = Channel(supervisor.sock.detach())
        # Built-in types only (:mod:`.messages`): no str or int subclass reaches the channel.
        start = Start(
            [str(word) for word in self.command],
            str(self.cwd),
            {str(name): str(value) for name, value in self.env.items()},
            float(self.grace_s),
        )
        self.channel.send({START: start.to_dict()})
        # The output thread after the request: the pipe holds what the program says meanwhile.
        self._pump = threading.Thread(
            target=self._copy_output, args=(supervisor.process.stdout,), daemon=True
        )
        self._pump.start()
        reply = self.channel.receive(None)
        if reply is not None and STARTED in reply:
            self.pid = int(reply[STARTED])
            return None
        answered = reply is not None and CANNOT_START in reply
        if not answered:
            supervisor.process.kill()  # gone already: it never gets to start one
        self._close()
        if not answered:  # gone: whatever it may have started goes with it
            kill_carriers(self.token)
        return reply if answered else {}

    def poll(self) -> int | None:
        """The program's exit status once it and every process it started are gone."""
        return self.wait(0)

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds; the exit status, or None if still running."""
        if self.ending is None:
            assert self.channel is not None
            report = self.channel.receive(max(timeout, 0))
            if report is not None and ENDED in report:
                self._ended(Ending.from_dict(report[ENDED]))
            elif self.channel.closed:
                self._supervisor_lost()
        return None if self.ending is None else self.ending.status

    def reached_by(self, signum: int) -> None:
        """``signum`` came to the runner as a notice and may have reached the program at the
        same moment (a machine, a systemd unit or a Slurm job going down signals every
        process): a program's end by it is its answer to the notice, never an interruption."""
        if signum not in self.signals_sent:
            self.signals_sent.append(signum)

    def signal_group(self, signum: int) -> None:
        """Signal every process of the program; remember it so it is never an interruption."""
        self.signals_sent.append(signum)
        self._ask({SIGNAL: int(signum)})  # a plain int: the channel carries built-in types only

    def kill(self) -> int:
        """End the whole tree now (SIGKILL) and wait until it is gone."""
        if self.ending is None:
            self.signals_sent.append(signal.SIGKILL)
            self._ask({KILL: True})
            if self.wait(KILL_WAIT_S) is None:
                self._supervisor_lost()  # unresponsive: end it and sweep by token
        assert self.ending is not None
        return self.ending.status

    def stop(self, signum: int, grace_s: float) -> int:
        """Send ``signum`` to the group, allow ``grace_s`` seconds, then kill what is left."""
        self.signal_group(signum)
        status = self.wait(grace_s)
        return status if status is not None else self.kill()

    def kill_leftovers(self) -> None:
        """Nothing of the program may outlive the attempt (a no-op once its tree is gone)."""
        self.kill()

    @property
    def tree_gone(self) -> bool:
        """The supervisor reported the program and every process below it ended (not so for
        a lost supervisor, whose leftovers were killed by token as far as they could be)."""
        return self.ending is not None and self.supervisor_lost is None

    def interruption(self) -> Loss | None:
        """The process whose death by a signal nodus did not send ended a launcher non-zero."""
        assert self.ending is not None
        return self.ending.interruption(self.signals_sent)

    def finish_output(self) -> None:
        """Let the output thread write the program's last lines before the attempt is closed."""
        if self._pump is not None:
            self._pump.join(timeout=5)

    # --- the supervisor ---------------------------------------------------------------------

    def _ask(self, request: dict[str, Any]) -> None:
        if self.ending is None and self.channel is not None:
            self.channel.send(request)

    def _ended(self, ending: Ending) -> None:
        """The supervisor reported the tree gone and let go of the output; it exits now and
        is reaped."""
        self.ending = ending
        assert self.supervisor is not None and self.channel is not None
        self.channel.close()
        reap_supervisor(self.supervisor)

    def _supervisor_lost(self) -> None:
        """The supervisor died or hangs: kill it, then whatever carries the attempt's token."""
        assert self.supervisor is not None
        self.supervisor.kill()
        status = self.supervisor.wait()
        self.survivors = kill_carriers(self.token)
        self.supervisor_lost = (
            f"killed by {signal_name(-status)}" if status < 0 else f"exited with status {status}"
        )
        self._ended(Ending(status=-signal.SIGKILL))

    def _close(self) -> None:
        assert self.supervisor is not None and self.channel is not None
        self.channel.close()
        reap_supervisor(self.supervisor)

    def _why_not(self, reply: dict[str, Any] | None) -> str:
        program = self.command[0]
        if not reply:
            return f"command {program!r} cannot start: its supervisor did not answer"
        why = CannotStart.from_dict(reply[CANNOT_START])
        if why.errno == errno.ENOENT:
            return f"command {program!r} cannot start: not found (check `command` and PATH)"
        if why.errno == errno.EACCES:
            return f"command {program!r} cannot start: not executable (check its permissions)"
        return f"command {program!r} cannot start: {why.message}"

    # --- output -----------------------------------------------------------------------------

    def _copy_output(self, stream: IO[bytes]) -> None:
        with os.fdopen(create_private(self.log_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
            for line in iter(stream.readline, b""):
                log.write(line)
                log.flush()
                self.output_at = time.monotonic()
                self.output_lines += 1
                self._show(line)

    def _show(self, line: bytes) -> None:
        # a progress bar's frames as the frame a terminal would leave, no cursor escapes: the
        # runner's output is often a cron job's log file (the attempt's log keeps every byte)
        shown, _ = collapse("", line.decode("utf-8", errors="replace"), final=True)
        if not shown:
            return
        try:
            self.terminal.write(f"[{self.prefix}] {shown[0]}\n")
            self.terminal.flush()
        except (OSError, ValueError):
            pass  # a closed terminal must not stop the log file


def reap_supervisor(process: subprocess.Popen[bytes]) -> None:
    """Reap a supervisor that was told to go: its exit awaited ``KILL_WAIT_S`` at most, then
    killed (a hung one must not hang the runner)."""
    if not _exited(process, KILL_WAIT_S):
        process.kill()
    process.wait()


def _exited(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to ``timeout`` for ``process`` to exit, woken the moment it does (``Popen.wait``
    with a timeout polls, sleeping 0.5, 1, 2 ... ms: milliseconds on a recovery's path)."""
    try:
        fd = os.pidfd_open(process.pid)  # unreaped, so the pid is still this process's
    except OSError:
        return process.poll() is not None
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return process.poll() is not None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
