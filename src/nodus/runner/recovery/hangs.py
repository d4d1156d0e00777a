"""Whether a running program hangs, and what its timeout is now: pure, in milliseconds.

``[execution] hang_timeout`` is ``"auto"``, ``"off"`` or a number of seconds. Progress is what a
person would call it: a line of output, a training step reported, a save, a committed snapshot,
a write into the selection. The attempt (:mod:`nodus.runner.attempt.watch`) tells a
:class:`ProgressClock` each one it sees, with the time, and asks it whether the program hangs.

Start-up lasts until the first *training* progress (a step, a save, a commit or a write into the
selection; output alone does not end it). During start-up the timeout is
``HANG_STARTUP_S`` (30 min; with a duration given, the longer of the two): loading a
model, a dataset or a compiler's cache may be silent for long.

After start-up, under ``"auto"``, the timeout is ``HANG_FACTOR`` (5) times the longest
interval between two progress signals the stage has shown since its training started (in this
attempt or an earlier one of the same drive), never below ``HANG_FLOOR_S`` (10 min);
until one such interval has been seen it stays the start-up allowance. With a duration given,
the timeout is that duration. ``"off"`` never ends a program. Why these numbers: their
docstrings in :mod:`nodus.schemas.defaults`, and docs/recovery.md ("Hangs").
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus.schemas import defaults

__all__ = ["FACTOR", "FLOOR_MS", "STARTUP_MS", "Hang", "ProgressClock", "timeout_ms"]

HANG_STARTUP_S = 30 * 60.0
"""``hang_timeout``'s start-up allowance: until the program's first training progress (a step,
a save, a write into its selection), it is ended only after this long without any progress
(output included). The anchor (NVIDIA's Resiliency Extension) allows an hour before the first
heartbeat; nodus counts output as progress, so a start-up silent for half an hour is rare, and a
hang there costs half as much."""

HANG_FACTOR = 5
"""``hang_timeout = "auto"``: the timeout is this many times the longest interval between two
progress signals the stage has shown since its training started (the anchor's safety factor)."""

HANG_FLOOR_S = 10 * 60.0
"""``hang_timeout = "auto"``: never a shorter timeout than this; torch.distributed's own
collective timeout (NCCL's default), so a phase not yet seen (the first evaluation) gets ten
minutes, and a collective slower than that is already an error to torch."""

STARTUP_MS = round(HANG_STARTUP_S * 1000)
FACTOR = HANG_FACTOR
FLOOR_MS = round(HANG_FLOOR_S * 1000)


def timeout_ms(setting: float | str, trained: bool, longest_ms: int | None) -> int | None:
    """The timeout now, in ms (None: never ended).

    ``setting``: ``"auto"``, ``"off"`` or seconds; ``trained``: training progress was seen since
    the program started; ``longest_ms``: the longest interval between progress signals the stage
    has shown since its training started (None: none yet)."""
    if setting == defaults.HANG_TIMEOUT_OFF:
        return None
    if isinstance(setting, str):
        if setting != defaults.HANG_TIMEOUT_AUTO:
            raise ValueError(f"hang_timeout {setting!r}: neither auto, off nor seconds")
        if not trained or longest_ms is None:
            return STARTUP_MS
        return max(FLOOR_MS, FACTOR * longest_ms)
    given = round(float(setting) * 1000)
    return given if trained else max(given, STARTUP_MS)


@dataclass(frozen=True)
class Progress:
    """One progress signal: when (ms on the attempt's clock) and what, in words."""

    at_ms: int
    what: str


@dataclass(frozen=True)
class Hang:
    """A program that made no progress for ``quiet_ms`` (at least ``timeout_ms``)."""

    quiet_ms: int
    timeout_ms: int
    last: str  # the last progress, in words ("step 40", "a line of output")
    trained: bool  # it had made training progress: start-up was over


class ProgressClock:
    """The progress of one attempt, as its signals arrive; no clock of its own (times in ms).

    ``longest_ms``: what the stage showed in earlier attempts (see :func:`timeout_ms`)."""

    def __init__(
        self, setting: float | str, started_ms: int, longest_ms: int | None = None
    ) -> None:
        self.setting = setting
        self.last = Progress(started_ms, "none since the start")
        self.trained = False
        self.longest_ms = longest_ms

    def progressed(self, at_ms: int, what: str, training: bool) -> None:
        """Progress at ``at_ms``; ``training``: a step, a save, a commit or a write (not only
        output). Its interval counts toward the longest once training has started."""
        if at_ms < self.last.at_ms:
            return  # seen late: an older signal than the last says nothing new
        if self.trained:
            self.longest_ms = max(self.longest_ms or 0, at_ms - self.last.at_ms)
        self.trained = self.trained or training
        self.last = Progress(at_ms, what)

    def timeout_ms(self) -> int | None:
        return timeout_ms(self.setting, self.trained, self.longest_ms)

    def hang(self, now_ms: int) -> Hang | None:
        """A :class:`Hang` once the program made no progress for its timeout by ``now_ms``."""
        timeout = self.timeout_ms()
        quiet = now_ms - self.last.at_ms
        if timeout is None or quiet < timeout:
            return None
        return Hang(quiet, timeout, self.last.what, self.trained)
