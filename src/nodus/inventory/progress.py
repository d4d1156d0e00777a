"""A one-line progress bar for long transfers, drawn only on a terminal.

Cron jobs and pipes get nothing (their logs stay clean); a person at a terminal sees how far a
download is. The bar is redrawn at most every ``REDRAW_S`` so a fast copy is not slowed by it.
"""

from __future__ import annotations

import sys
import time
from typing import IO

from nodus.schemas.units import human_bytes

__all__ = ["Progress", "human_bytes"]

REDRAW_S = 0.1
WIDTH = 30


class Progress:
    """Counts bytes toward ``total``; draws on ``stream`` only when it is a terminal."""

    def __init__(self, label: str, total: int, stream: IO[str] | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self._drawn_at = 0.0

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and now - self._drawn_at >= REDRAW_S:
            self._drawn_at = now
            self._draw()

    def close(self) -> None:
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        fraction = self.done / self.total if self.total else 1.0
        filled = int(WIDTH * min(fraction, 1.0))
        bar = "#" * filled + "-" * (WIDTH - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {fraction:4.0%} "
            f"{human_bytes(self.done)} / {human_bytes(self.total)}"
        )
        self.stream.flush()
