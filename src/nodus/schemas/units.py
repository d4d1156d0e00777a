"""Sizes and durations as people write and read them.

One formatter for every message and listing (``256.0 MiB``, ``2.0 GiB``), and the one duration
grammar (``"90s"``, ``"15m"``, ``"1h"``, ``"2d"``, plain seconds) that a workload's durations and
``--deadline`` share. Standard library only, so ``nodus runs list`` and the runner pay nothing
for it.
"""

from __future__ import annotations

import re

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")

DURATION_PATTERN = r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*"
"""A duration as text: a number and an optional unit (s, m, h, d), spaces around allowed."""
_DURATION = re.compile(DURATION_PATTERN)
_SECONDS_PER = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def human_bytes(count: float) -> str:
    """``count`` bytes in the largest binary unit below 1024 of it (whole bytes as such)."""
    size = float(count)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def duration_seconds(text: str) -> float | None:
    """``text`` (:data:`DURATION_PATTERN`) as seconds; None when it is no duration."""
    match = _DURATION.fullmatch(text)
    return float(match.group(1)) * _SECONDS_PER[match.group(2)] if match else None


def human_duration(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``2 h 05 min``: a time left or an age, to the unit that matters."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
