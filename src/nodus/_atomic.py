"""Small JSON files that other processes read while they are replaced.

The runner and the program it supervises talk through such files (``.nodus/``), as do the lock
holder notes: a reader must see the old file or the whole new one, never a torn one, and a
published file must survive a crash of the machine.
"""

from __future__ import annotations

import json
import os
from typing import Any


def write_json_atomic(path: str, data: Any, durable: bool = True) -> None:
    """Write JSON to a temporary name, fsync it, rename it over ``path``, fsync the folder.

    ``durable=False`` leaves out both fsyncs, for a file that a crash of the machine makes
    moot: one an attempt's preparation writes anew each time (readers still never see it torn).
    """
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    """Make a rename inside ``path`` durable (a crash must not undo a published file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
