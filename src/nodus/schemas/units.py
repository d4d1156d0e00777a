"""Sizes as people read them: the binary units the workload's own limits are written in.

One formatter for every message and listing (``256.0 MiB``, ``2.0 GiB``); imports nothing, so
``nodus runs list`` and the runner pay nothing for it.
"""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(count: float) -> str:
    """``count`` bytes in the largest binary unit below 1024 of it (whole bytes as such)."""
    size = float(count)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
