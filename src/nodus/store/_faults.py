"""Crash injection for the deletion tests: ``NODUS_STORE_CRASH_AT=<point>`` kills the process.

Each step of a deletion (``delete_kind``, ``delete``, ``finish_deletions``) and the blob sweep
between two deletions calls :func:`crash_point` with the step's name; when the variable names
it, the process ends at once with status 137 (as after SIGKILL), flushing nothing, so the store
is left exactly as a kill there would leave it. The variable is read once, at import: unset,
a crash point costs one comparison. docs/store.md lists the points.
"""

from __future__ import annotations

import os

__all__ = ["crash_point"]

_CRASH_AT = os.environ.get("NODUS_STORE_CRASH_AT") or None


def crash_point(name: str) -> None:
    if name == _CRASH_AT:
        os._exit(137)
