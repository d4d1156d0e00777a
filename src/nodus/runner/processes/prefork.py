"""The program's process, forked before the program is known: starting it is one ``exec``.

``subprocess.Popen`` with a ``preexec_fn`` (the parent-death signal the program needs) cannot
use ``vfork``: it forks the supervisor and runs Python in the child before the ``exec``, 4-15
ms on the path from a start request to the program running. The supervisor forks this child
while it waits for its start request instead. The child takes what ``Popen`` would have set up
(its own session, so its group is the program's; SIGKILL when the supervisor dies; stdin from
/dev/null; default signal handling), then blocks on a pipe. The start request writes the
command, folder and environment into that pipe; the child looks the command up on the
environment's PATH as ``Popen`` does and ``exec``\\ s it, so the program keeps the child's pid.
An ``exec`` that fails is reported through a close-on-exec pipe, whose end of file without a
word means the program runs.
"""

from __future__ import annotations

import errno
import json
import os
import signal

from nodus.runner.processes import procfs

_NOT_RUN = 127  # the child's exit status when nothing was executed


class Prefork:
    """One forked child waiting for the program to ``exec``; :meth:`discard` if never used."""

    def __init__(self) -> None:
        parent = os.getpid()
        spec_read, self._spec = os.pipe()
        self._errors, error_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child never returns from here
            os.close(self._spec)
            os.close(self._errors)
            _child(parent, spec_read, error_write)
        os.close(spec_read)
        os.close(error_write)

    def exec(self, command: list[str], cwd: str, env: dict[str, str]) -> None:
        """Start the program in the child; OSError (errno, strerror) if it could not run."""
        spec = json.dumps({"command": command, "cwd": cwd, "env": env}).encode()
        try:
            _write_all(self._spec, spec)
        except OSError:
            self.discard()  # the child is gone (killed while it waited)
            raise
        os.close(self._spec)
        self._spec = -1
        report = _read_all(self._errors)
        os.close(self._errors)
        self._errors = -1
        if report:  # nothing runs: the child has exited
            os.waitpid(self.pid, 0)
            number, _, message = report.decode("utf-8", "replace").partition(":")
            raise OSError(int(number), message)

    def discard(self) -> None:
        """No program after all: the child reads end of file and exits; reap it."""
        for fd in (self._spec, self._errors):
            if fd >= 0:
                os.close(fd)
        self._spec = self._errors = -1
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass  # reaped by the supervisor's own wait already


def _child(parent: int, spec_read: int, error_write: int) -> None:
    """In the forked child: prepare as ``Popen`` would, wait for the spec, ``exec`` it."""
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)  # Python ignores SIGPIPE; a program must not
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        procfs.die_with_parent(parent, signal.SIGKILL)()
        os.setsid()  # its own group: the runner's stop requests go to the program
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        spec = _read_all(spec_read)
        if spec:
            _exec(json.loads(spec), error_write)  # returns only if nothing could run
    except OSError as error:
        _report(error_write, error)
    except BaseException as error:  # never a start reported as a success by mistake
        _report(error_write, OSError(0, f"{type(error).__name__}: {error}"))
    os._exit(_NOT_RUN)


def _exec(spec: dict, error_write: int) -> None:
    """``exec`` the command as ``Popen`` does; on failure, say why on ``error_write``."""
    command, env = spec["command"], spec["env"]
    os.chdir(spec["cwd"])
    program = command[0]
    candidates = (
        [program]
        if os.path.dirname(program)
        else [os.path.join(folder, program) for folder in os.get_exec_path(env)]
    )
    telling: OSError | None = None
    last = OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    for candidate in candidates:
        try:
            os.execve(candidate, command, env)
        except OSError as error:
            # As Popen: a later folder may hold it; the first error other than "no such file
            # here" is the one that tells.
            last = error
            if telling is None and error.errno not in (errno.ENOENT, errno.ENOTDIR):
                telling = error
    _report(error_write, telling or last)


def _report(fd: int, error: OSError) -> None:
    message = error.strerror or str(error)
    _write_all(fd, f"{error.errno}:{message}".encode())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)
