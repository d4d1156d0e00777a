"""The disk guard: periodic saves stop before the staging disk fills up.

Each capture writes the snapshot's new files to the staging disk first: the store's own disk
for a local (``file://``) store, the disk of ``$NODUS_HOME`` (where the staging area lives) for
any other. When a disk fills in the middle of training, every later capture fails and the final
state is lost with them. So while :data:`~nodus.schemas.DISK_GUARD_SNAPSHOTS` (3)
snapshots of the size at hand do not fit in the disk's free space, periodic saves are turned
off, once per attempt, with a ``checkpoint_disabled_disk {free_bytes, snapshot_bytes, disk}``
event: the space left is kept for the final save, the outputs and saves the runner asks for
(pause, preemption notice), which always go ahead.

When the size is known:

- before saves begin, on an attempt restored from a snapshot: that snapshot's size;
- before each capture: the size of what it would take, read from the working copy, so a fresh
  run is checked before its first periodic snapshot is stored. The full size counts, not only
  the files the store lacks: a snapshot's weights and optimizer state change at every step. A
  sparse file counts the bytes it has allocated: the store keeps its holes.

Turning saves off reaches the program at runtime: the integration reads
:class:`~nodus.protocol.RuntimeSettings` (``.nodus/runtime.json``) at each step end and stops
its periodic saves; a directory-contract program cannot be stopped from writing its folders, so
the runner stops capturing them and captures the selection once more when the program exits.
Saves stay off for the rest of the attempt: while they are off nothing is committed, so
rotation frees nothing, and saves that come and go with the free space would read as random.
The next attempt (a resume or a recovery) checks again from the start.
"""

from __future__ import annotations

import contextlib
import os
import stat as stat_mod
from collections.abc import Callable, Iterable
from typing import Any

from nodus import protocol
from nodus._atomic import write_json_atomic

__all__ = ["ENV_FREE_BYTES", "DiskGuard", "free_bytes", "staging_disk", "stored_bytes"]

DISK_GUARD_SNAPSHOTS = 3
"""Periodic saves stay on while this many snapshots fit in the staging disk's free space
(:mod:`nodus.runner.capture.disk_guard`); the final save always happens."""

EVENT_DISABLED = "checkpoint_disabled_disk"

ENV_FREE_BYTES = "NODUS_FREE_BYTES"
"""Fault injection for tests: the free bytes the guard sees on the staging disk, instead of
what ``statvfs`` says, so a test can run out of space without filling a disk. Never set in
normal use."""


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the disk of ``path``."""
    injected = os.environ.get(ENV_FREE_BYTES)
    if injected:
        return int(injected)
    stat = os.statvfs(_existing(path))
    return stat.f_bavail * stat.f_frsize


def stored_bytes(root: str, entries: Iterable[tuple[str, int, int]]) -> int:
    """What a capture of ``entries`` (paths under ``root``, with their lengths) writes to the
    staging disk: a file with holes counts the bytes it has allocated, since the store keeps
    its holes (docs/store.md); a file gone meanwhile counts its length."""
    total = 0
    for path, size, _mtime in entries:
        try:
            info = os.lstat(os.path.join(root, path))
        except OSError:
            total += size
            continue
        allocated = info.st_blocks * 512 if stat_mod.S_ISREG(info.st_mode) else size
        total += min(size, allocated)
    return total


def staging_disk(store: Any, home: str) -> str:
    """Where captures are written first: a local store's folder, else ``$NODUS_HOME``."""
    storage = store.storage
    root = getattr(storage, "root", None)
    return root if storage.is_local and root else home


class DiskGuard:
    """Turns periodic saves off, once, when three snapshots would not fit on the disk."""

    def __init__(
        self,
        disk: str,
        control: protocol.ControlPaths,
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.disk = disk
        self.control = control  # where the program learns that its periodic saves are off
        self.on_event = on_event
        self.periodic = True

    def check(self, snapshot_bytes: int) -> bool:
        """Whether periodic saves stay on, with snapshots of ``snapshot_bytes``."""
        if not self.periodic or snapshot_bytes <= 0:
            return self.periodic
        try:
            free = free_bytes(self.disk)
        except OSError:
            return True  # the disk cannot be asked: the capture itself will say what fails
        if free >= DISK_GUARD_SNAPSHOTS * snapshot_bytes:
            return True
        self._turn_off(free, snapshot_bytes)
        return False

    def admits(self, periodic: bool, measure: Callable[[], int]) -> bool:
        """Whether a capture goes ahead: any that is not periodic does, whatever the disk.

        ``measure`` gives the capture's size; it is only read while saves are still on.
        """
        if not periodic:
            return True
        return self.periodic and self.check(measure())

    def _turn_off(self, free: int, snapshot_bytes: int) -> None:
        self.periodic = False
        reason = (
            f"{DISK_GUARD_SNAPSHOTS} snapshots of {snapshot_bytes} bytes would not fit "
            f"in the {free} bytes free on {self.disk}"
        )
        settings = protocol.RuntimeSettings(periodic_saves=False, reason=reason)
        # The disk it guards may be full already: then the program is not told, and nodus
        # takes none of its periodic saves all the same (admits says no from now on).
        with contextlib.suppress(OSError):
            write_json_atomic(self.control.runtime, settings.to_dict())
        self.on_event(
            EVENT_DISABLED,
            {"free_bytes": free, "snapshot_bytes": snapshot_bytes, "disk": self.disk},
        )


def _existing(path: str) -> str:
    """``path`` or its nearest existing parent (a store folder not created yet)."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path
