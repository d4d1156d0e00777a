"""What passes between the runner and an attempt's supervisor (:mod:`.supervisor`).

One message a frame over a socket pair, both ways; each message a dict:

    runner → supervisor   {"start": {"command": [...], "cwd": ..., "env": {...}, "grace": 60.0}}
                          {"signal": 15}   forward to the program's process group
                          {"kill": True}   SIGKILL the whole tree now
    supervisor → runner   {"started": PID} | {"cannot_start": {"errno": N, "message": "..."}}
                          {"ended": Ending}   sent once the whole tree is gone

A frame is the message's length (4 bytes, big-endian) and the message in :mod:`marshal`'s
format: both ends are the same interpreter (the runner starts the supervisor with its own
``sys.executable``), the socket pair is theirs alone, and ``marshal`` is built into the
interpreter, where ``json`` (with ``re`` and ``enum`` below it) would add about a third to the
supervisor's start-up.

The standard library's lightest part only: the supervisor imports this at every attempt's
start, before the program can start. Hence plain records, not dataclasses nor ``typing``'s
NamedTuple, whose imports cost a supervisor as long again as the rest of its modules
(docs/benchmarks.md, "Start-up").
"""

from __future__ import annotations

import marshal
import os
import select
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any

    Message = dict[str, Any]
    """One message of the channel: a dict of what ``marshal`` holds (str, int, float, bool,
    None, lists, tuples and dicts of them)."""

START, SIGNAL, KILL = "start", "signal", "kill"
"""Request keys, runner → supervisor."""

STARTED, CANNOT_START, ENDED = "started", "cannot_start", "ended"
"""Report keys, supervisor → runner."""

PROCESS_STATUS, PROCESS_EVENTS = "process_status", "process_events"
LAUNCHER_EXIT_STATUS = "launcher_exit_status"
"""How a :class:`Loss`'s signal is known: the process's own status (reaped, or read from its
zombie), the kernel's process-events connector, or a shell's 128+N exit status."""

_LENGTH = 4  # bytes of a frame's length


class Record:
    """A message's record: its fields are its ``__slots__``; equal when they are."""

    __slots__: tuple[str, ...] = ()

    def values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def to_dict(self) -> Message:
        return dict(zip(self.__slots__, self.values()))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Record)
            and type(other) is type(self)
            and self.values() == other.values()
        )

    def __hash__(self) -> int:
        return hash(self.values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self.to_dict().items())
        return f"{type(self).__name__}({fields})"


class Start(Record):
    """What to run: the program's command, working folder and environment, and its grace."""

    __slots__ = ("command", "cwd", "env", "grace")

    def __init__(self, command: list[str], cwd: str, env: dict[str, str], grace: float) -> None:
        self.command = command
        self.cwd = cwd
        self.env = env
        self.grace = grace  # seconds between SIGTERM and SIGKILL when the tree is stopped

    @classmethod
    def from_dict(cls, data: Message) -> Start:
        return cls(**data)


class CannotStart(Record):
    """Why ``exec`` of the command failed."""

    __slots__ = ("errno", "message")

    def __init__(self, errno: int | None, message: str) -> None:
        self.errno = errno
        self.message = message

    @classmethod
    def from_dict(cls, data: Message) -> CannotStart:
        return cls(**data)


class Loss(Record):
    """A process of the tree that died of a signal, or vanished (``signal`` 0: unknown)."""

    __slots__ = ("command", "evidence", "oom", "parent", "pid", "signal")

    def __init__(
        self,
        pid: int,
        command: str,
        parent: int,
        signal: int,
        oom: bool = False,
        evidence: str = PROCESS_STATUS,
    ) -> None:
        self.pid = pid
        self.command = command
        self.parent = parent
        self.signal = signal
        self.oom = oom  # the kernel counted an OOM kill in the attempt's memory cgroup
        self.evidence = evidence  # PROCESS_STATUS, PROCESS_EVENTS or LAUNCHER_EXIT_STATUS

    @classmethod
    def from_dict(cls, data: Message) -> Loss:
        return cls(**data)


class Ending(Record):
    """How an attempt's program ended, as its supervisor saw the whole tree."""

    __slots__ = ("lost", "oom", "status", "vanished")

    def __init__(
        self,
        status: int,
        oom: bool = False,
        lost: tuple[Loss, ...] = (),
        vanished: tuple[Loss, ...] = (),
    ) -> None:
        self.status = status  # as subprocess reports it: negative when killed by that signal
        self.oom = oom  # the program itself died in an OOM kill the kernel counted
        self.lost = lost  # died of a signal nodus did not send, before the program ended
        self.vanished = vanished  # children of the program reaped before they could be seen

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
        if self.vanished and _named_signal(signum) and signum not in sent:
            last = self.vanished[-1]
            return Loss(last.pid, last.command, last.parent, signum, evidence=LAUNCHER_EXIT_STATUS)
        return None


def _named_signal(signum: int) -> bool:
    """True for a signal with a name (``signal.Signals``): only the runner asks, so only the
    runner imports ``signal``, whose enums the supervisor's start does without."""
    import signal

    try:
        signal.Signals(signum)
    except ValueError:
        return False
    return True


class Channel:
    """Frames of messages over a stream socket's descriptor, which the channel owns."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False  # the other side is gone
        self._buffer = b""

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        """Close the descriptor; once, as a socket's ``close`` (its number may be reused)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def send(self, message: Message) -> bool:
        """False when the other side is gone (nobody is left to tell)."""
        data = marshal.dumps(message)
        frame = memoryview(len(data).to_bytes(_LENGTH, "big") + data)
        try:
            while frame:
                frame = frame[os.write(self.fd, frame) :]
        except OSError:
            return False
        return True

    def receive(self, timeout: float | None) -> Message | None:
        """The next message, or None if none came within ``timeout`` (or the channel closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (size := self._whole()) is None:
            if self.closed:
                return None
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self.fd], [], [], left)[0]:
                return None
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                data = b""
            self.closed = not data
            self._buffer += data
        frame, self._buffer = self._buffer[_LENGTH:size], self._buffer[size:]
        message: Message = marshal.loads(frame)  # both sides send dicts only
        return message

    def _whole(self) -> int | None:
        """The end of the first frame in the buffer, once all of it is there."""
        if len(self._buffer) < _LENGTH:
            return None
        end = _LENGTH + int.from_bytes(self._buffer[:_LENGTH], "big")
        return end if len(self._buffer) >= end else None
