"""Fault injection for the store's tests; none of it is ever set in normal use.

``NODUS_STORE_CRASH_AT=<point>`` kills the process: each step of a deletion (``delete_kind``,
``delete``, ``finish_deletions``) and the blob sweep between two deletions calls
:func:`crash_point` with the step's name; when the variable names it, the process ends at once
with status 137 (as after SIGKILL), flushing nothing, so the store is left exactly as a kill
there would leave it. docs/store.md lists the points.

``NODUS_STORE_THROTTLE_MBPS=<MB/s>`` slows every write to a non-local store (``s3://``, …) to
that rate, as a slow network link would: the remote-store tests and ``benchmarks/remote.py``
use it to make uploads lag behind captures. :func:`throttled` wraps the storage.

Both variables are read once, at import: unset, they cost one comparison.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from nodus.store.storage import Storage

__all__ = ["crash_point", "throttled"]

_CRASH_AT = os.environ.get("NODUS_STORE_CRASH_AT") or None
_THROTTLE_MBPS = float(os.environ.get("NODUS_STORE_THROTTLE_MBPS") or 0)


def crash_point(name: str) -> None:
    if name == _CRASH_AT:
        os._exit(137)


def throttled(storage: Storage) -> Storage:
    """``storage`` itself, or wrapped to write at ``NODUS_STORE_THROTTLE_MBPS`` when it is set."""
    if _THROTTLE_MBPS <= 0:
        return storage
    return cast("Storage", _Throttled(storage, _THROTTLE_MBPS * 1e6))


class _Throttled:
    """A storage whose writes share one link of ``rate`` bytes per second (a slow network)."""

    def __init__(self, storage: Storage, rate: float) -> None:
        self._storage = storage
        self._rate = rate
        self._link = threading.Lock()  # parallel uploads share the one link
        self._free_at = time.monotonic()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def _send(self, size: int) -> None:
        with self._link:
            start = max(self._free_at, time.monotonic())
            self._free_at = start + size / self._rate
            done = self._free_at
        time.sleep(max(0.0, done - time.monotonic()))

    def write(self, key: str, data: bytes) -> None:
        self._send(len(data))
        self._storage.write(key, data)

    def put_file(
        self, local_path: str, key: str, progress: Callable[[int], None] | None = None
    ) -> None:
        self._send(os.path.getsize(local_path))
        self._storage.put_file(local_path, key, progress)

    def adopt_file(self, local_path: str, key: str) -> bool:
        if self._storage.exists(key):
            return self._storage.adopt_file(local_path, key)
        self._send(os.path.getsize(local_path))
        return self._storage.adopt_file(local_path, key)
