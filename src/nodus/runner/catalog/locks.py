"""Run locks: at most one runner drives a run (or a ``--key``) at a time.

A lock is an OS file lock (``flock``), so it is released by the kernel when its runner dies, even
by SIGKILL: "lock free but run unfinished" therefore means "its runner died", which is how
``nodus run --key`` and ``runs wait`` tell a lost runner from a live one. Next to the lock file a
small JSON file names the holder (pid, host) for the "already running" message.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from typing import Any

from nodus._atomic import create_private, private_folder, write_json_atomic
from nodus.errors import AlreadyRunningError
from nodus.schemas import defaults


def lock_name_for(run_id: str, key: str | None) -> str:
    """A key's lock covers its run before the run exists, so keyed runs lock on the key."""
    if key is None:
        return run_id
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:24]


class RunLock:
    """Held by the runner of one run for as long as it drives it."""

    def __init__(self, home: str, name: str, label: str) -> None:
        folder = os.path.join(home, defaults.LOCKS_DIR)
        private_folder(folder)
        self.path = os.path.join(folder, name + ".lock")
        self.holder_path = os.path.join(folder, name + ".holder.json")
        self.label = label  # what the user called it: the key or the run id
        self._fd: int | None = None  # open while this object holds the lock

    def acquire(self) -> RunLock:
        """Take the lock now or raise AlreadyRunningError naming the holder."""
        if self._fd is None:
            self._fd = _try_lock(self.path)
        if self._fd is None:
            raise AlreadyRunningError(self._held_message())
        write_json_atomic(self.holder_path, {"pid": os.getpid(), "host": socket.gethostname()})
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None

    def is_held_elsewhere(self) -> bool:
        """True while another process (or another lock object of this one) holds the lock."""
        return _held(self.path)

    def holder(self) -> dict[str, Any]:
        try:
            with open(self.holder_path, encoding="utf-8") as handle:
                held: dict[str, Any] = json.load(handle)
                return held
        except (OSError, ValueError):
            return {}

    def _held_message(self) -> str:
        holder = self.holder()
        who = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
        return f"{self.label} is already running elsewhere ({who}); wait for it or cancel it"

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_held(home: str, name: str) -> bool:
    """Whether a process holds the lock ``name`` of ``home`` now; creates nothing (a read-only
    reader such as ``nodus ui`` asks too). A lock file never made was never held."""
    return _held(os.path.join(home, defaults.LOCKS_DIR, name + ".lock"))


def _held(path: str) -> bool:
    """The probe: a shared lock taken and dropped at once, refused while a runner holds its
    exclusive one; a file that does not exist was never held (nothing is created)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # refused while a runner holds it
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the probe's shared lock at once
    return False


def _try_lock(path: str) -> int | None:
    """A descriptor of ``path`` holding its exclusive lock, or None when another holds it.

    ``flock`` locks belong to the open file, so the kernel drops them when the holder dies,
    and a second open of the same file (a probe, even in the holder's process) is refused.
    Imported by every `nodus run`, so it is the system call itself rather than a library.
    """
    fd = create_private(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
