"""``save_every = "auto"``: measure what saves cost the training loop and pick the cadence.

A save costs training twice: the stall at its boundary (the copy into memory, and any wait for
the previous write) and the slowdown of the steps trained while the background writer runs (it
competes for the CPU, memory bandwidth and the interpreter lock). Both show in the time between
optimizer boundaries, so a save's cost is what the intervals from its boundary until its write
has finished took beyond the step time without a save in flight (the median of recent such
intervals). With cost C and step time t, a save every k steps costs C / (k t) of training time:
the cadence is the smallest k within the bound, and never shorter than a write took (one write
is in flight at a time, so a save due before the previous one is written would wait for it).

Every save's measurement updates a running estimate of C and the cadence is chosen again, so it
follows the run as it goes; each change is a ``save_cadence`` event. The first save of an
attempt comes a few steps after its start, to measure before anything is chosen.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable

from nodus.schemas import defaults

Report = Callable[[int, float | None, int], None]
"""``report(every, overhead, step)``: a cadence was chosen at ``step``; overhead None = not
measured yet."""

_MIN_STEP_SAMPLES = 3  # fewer undisturbed steps than this say nothing about the step time


class AutoCadence:
    """The periodic saves of one attempt under ``save_every = "auto"``.

    The session calls :meth:`boundary` at every optimizer boundary before it decides anything,
    :meth:`due` to ask whether a periodic save is due there, and :meth:`saved` after any save
    (periodic, requested or at an epoch end), which starts that save's measurement.
    """

    def __init__(
        self, bound: float, anchor: int, report: Report, clock: Callable[[], float] | None = None
    ) -> None:
        self.bound = bound
        self.every = defaults.HF_AUTO_FIRST_EVERY
        self._anchor = anchor  # the step of the previous save, or where the attempt started
        self._report = report
        self._clock = clock or time.perf_counter
        self._last: tuple[int, float] | None = None  # (step, time) of the previous boundary
        self._undisturbed: deque[float] = deque(maxlen=defaults.HF_AUTO_STEP_SAMPLES)
        self._measuring: _Measure | None = None
        self._cost: float | None = None  # running estimate of one save's cost, seconds
        self._chosen = False  # still on the first, measuring cadence
        report(self.every, None, anchor)

    def boundary(self, step: int, writing: bool) -> None:
        """An optimizer boundary at ``step``; ``writing``: a save is being written right now."""
        now = self._clock()
        last = self._last
        if last is not None and last[0] == step:
            return  # an epoch end, right after its step's own boundary: no step trained
        self._last = (step, now)
        if last is None:
            return  # the attempt's first boundary: no interval ended here
        interval = now - last[1]
        measuring = self._measuring
        if measuring is None:
            self._undisturbed.append(interval)
            return
        measuring.intervals.append(interval)
        if not writing:  # the write finished during this interval: its cost is known
            self._measuring = None
            self._measured(measuring, step)

    def due(self, step: int) -> bool:
        """A periodic save is due: ``every`` steps since the previous save, and that save is
        written (still measured means its write was in flight at this boundary)."""
        return self._measuring is None and step - self._anchor >= self.every

    def saved(self, step: int, stall_s: float) -> None:
        """A save was taken at ``step``, stalling training ``stall_s``; its cost is measured
        until its write has finished."""
        self._anchor = step
        self._measuring = _Measure(step, stall_s)  # one still measured overlapped: dropped

    def _measured(self, measure: _Measure, step: int) -> None:
        written_in = step - measure.step  # steps until the write had finished
        if len(self._undisturbed) < _MIN_STEP_SAMPLES:
            self._choose(step, max(self.every, written_in), None)  # no step time to weigh by
            return
        step_s = statistics.median(self._undisturbed)
        # The stall alone is timed directly: on a busy machine the intervals' excess can read
        # as less than it, or as nothing, and a save is never free.
        excess = sum(measure.intervals) - step_s * len(measure.intervals)
        cost = max(measure.stall_s, excess)
        weight = defaults.HF_AUTO_COST_WEIGHT
        self._cost = cost if self._cost is None else weight * cost + (1 - weight) * self._cost
        within = max(1, math.ceil(self._cost / (self.bound * step_s) - 1e-9))
        best = max(within, written_in)
        if self._chosen and self.every * (1 - defaults.HF_AUTO_RETUNE_MARGIN) < best < self.every:
            best = self.every  # more frequent only when clearly so: noise must not retune
        first, self._chosen = not self._chosen, True
        self._choose(step, best, self._cost / (best * step_s), always=first)

    def _choose(self, step: int, every: int, overhead: float | None, always: bool = False) -> None:
        """Take ``every`` from ``step`` on; a change (or the first measured choice) is reported."""
        if every != self.every or always:
            self.every = every
            self._report(every, None if overhead is None else round(overhead, 4), step)


class _Measure:
    """One save being measured: the boundary intervals since it was taken."""

    def __init__(self, step: int, stall_s: float) -> None:
        self.step = step
        self.stall_s = stall_s
        self.intervals: list[float] = []
