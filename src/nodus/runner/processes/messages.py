"""What passes between the runner and an attempt's supervisor (:mod:`.supervisor`).

One JSON object per line over a socket pair, both ways:

    runner → supervisor   {"start": {"command": [...], "cwd": ..., "env": {...}, "grace": 60.0}}
                          {"signal": 15}   forward to the program's process group
                          {"kill": true}   SIGKILL the whole tree now
    supervisor → runner   {"started": PID} | {"cannot_start": {"errno": N, "message": "..."}}
                          {"ended": Ending}   sent once the whole tree is gone

Standard library only, and its lighter part: the supervisor imports this at every attempt's
start, before the program can start (hence tuples, not dataclasses, whose import costs a
supervisor about as long again as the rest of its modules: docs/benchmarks.md, "Recovery").
"""

from __future__ import annotations

import json
import select
import signal
import socket
import time
from collections.abc import Collection
from typing import Any, NamedTuple

Message = dict[str, Any]
"""One line of the channel: a JSON object (its values are whatever JSON holds)."""

START, SIGNAL, KILL = "start", "signal", "kill"
"""Request keys, runner → supervisor."""

STARTED, CANNOT_START, ENDED = "started", "cannot_start", "ended"
"""Report keys, supervisor → runner."""

PROCESS_STATUS, PROCESS_EVENTS = "process_status", "process_events"
LAUNCHER_EXIT_STATUS = "launcher_exit_status"
"""How a :class:`Loss`'s signal is known: the process's own status (reaped, or read from its
zombie), the kernel's process-events connector, or a shell's 128+N exit status."""


class Start(NamedTuple):
    """What to run: the program's command, working folder and environment, and its grace."""

    command: list[str]
    cwd: str
    env: dict[str, str]
    grace: float  # seconds between SIGTERM and SIGKILL when the tree is stopped

    def to_dict(self) -> Message:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Message) -> Start:
        return cls(**data)


class CannotStart(NamedTuple):
    """Why ``exec`` of the command failed."""

    errno: int | None
    message: str

    def to_dict(self) -> Message:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Message) -> CannotStart:
        return cls(**data)


class Loss(NamedTuple):
    """A process of the tree that died of a signal, or vanished (``signal`` 0: unknown)."""

    pid: int
    command: str
    parent: int
    signal: int
    oom: bool = False  # the kernel counted an OOM kill in the attempt's memory cgroup
    evidence: str = PROCESS_STATUS  # PROCESS_STATUS, PROCESS_EVENTS or LAUNCHER_EXIT_STATUS

    def to_dict(self) -> Message:
        return self._asdict()

    @classmethod
    def from_dict(cls, data: Message) -> Loss:
        return cls(**data)


class Channel:
    """One JSON object per line over a stream socket, both ways."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False  # the other side is gone
        self._buffer = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Message) -> bool:
        """False when the other side is gone (nobody is left to tell)."""
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            return False
        return True

    def receive(self, timeout: float | None) -> Message | None:
        """The next message, or None if none came within ``timeout`` (or the channel closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self.closed:
                return None
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            self.closed = not data
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        message: Message = json.loads(line)  # both sides send JSON objects only
        return message


class Ending(NamedTuple):
    """How an attempt's program ended, as its supervisor saw the whole tree."""

    status: int  # as subprocess reports it: negative when killed by that signal
    oom: bool = False  # the program itself died in an OOM kill the kernel counted
    lost: tuple[Loss, ...] = ()  # died of a signal nodus did not send, before the program ended
    vanished: tuple[Loss, ...] = ()  # children of the program reaped before they could be seen

    def to_dict(self) -> Message:
        return {
            "status": self.status,
            "oom": self.oom,
            "lost": [loss.to_dict() for loss in self.lost],
            "vanished": [loss.to_dict() for loss in self.vanished],
        }

    @classmethod
    def from_dict(cls, data: Message) -> Ending:
        return cls(
            status=data["status"],
            oom=data["oom"],
            lost=tuple(Loss.from_dict(d) for d in data["lost"]),
            vanished=tuple(Loss.from_dict(d) for d in data["vanished"]),
        )

    def interruption(self, sent: Collection[int]) -> Loss | None:
        """The process whose loss made a launcher exit non-zero, or None.

        Either a process of the tree died of a signal nodus did not send, or (a shell reaps its
        child before anyone can look) a child of the launcher vanished and the launcher exited
        128+N, the shells' way of saying that child died of signal N.
        """
        if self.status <= 0:
            return None
        for loss in self.lost:
            if loss.signal not in sent:
                return loss
        signum = self.status - 128
        if self.vanished and signum in _SIGNALS and signum not in sent:
            last = self.vanished[-1]
            return Loss(last.pid, last.command, last.parent, signum, evidence=LAUNCHER_EXIT_STATUS)
        return None


_SIGNALS = {int(s) for s in signal.Signals}
