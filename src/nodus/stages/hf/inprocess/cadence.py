"""``save_every = "auto"``: measure what saves cost the training loop and pick the cadence.

A save costs training three times: the stall at its boundary (the copy into memory, and any
wait for the previous write), the slowdown of the steps trained while the background writer
runs, and the slowdown while the runner captures what was written (in another process it hashes
the published files, links them into the store and commits; on a machine with fewer free cores
than processes it takes them from training). All of it shows in the time between optimizer
boundaries, so a save's cost is what the intervals from its boundary until the runner committed
it (``committed.json``), and a few steps more (``HF_AUTO_SETTLE_STEPS``: right after a commit
the integration removes the older checkpoint folder and the runner's retention deletes older
snapshots' files), took beyond the step time without a save in flight (the mean of recent
such intervals, far longer ones left out). That step time is taken on both sides of the save:
it is weighed only once ``HF_AUTO_FRESH_STEPS`` more steps trained without one, so a machine
that got faster or slower meanwhile does not make it look cheaper, and an attempt's first,
slower steps are no samples at all. With cost C and step time t, a save every k steps
costs C / (k t) of training time: the cadence is the smallest k within the bound, and never
shorter than a save took to be committed and weighed (one save is in flight at a time, so a
save due before the previous one is weighed waits for it). A runner that never commits (lost,
or its capture failed) ends a measurement ``HF_AUTO_COMMIT_WAIT_S`` after the write: saves never
stop for it.

Every save's measurement updates a running estimate of C and the cadence is chosen again, so it
follows the run as it goes; each change is a ``save_cadence`` event. The first save of an
attempt comes a few steps after its start, to measure before anything is chosen.

The bound is a ceiling, not a target: the cadence is chosen for ``HF_AUTO_AIM`` of it. Each
cost is an estimate from a few dozen intervals of a shared machine (a fixed cadence measured
against the same program without saves scatters by several percent from one run to the next),
and a cadence chosen for the bound itself would exceed it about as often as not.

The bound holds over the whole attempt, not only between saves: every save counts (the first,
measuring one, and those taken at epoch ends or on request), so the next periodic save waits
until the training since the attempt started pays for all of them and for itself. After the
measuring save that makes one longer gap; then the cadence alone keeps the account even.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable

HF_AUTO_FIRST_EVERY = 5
"""``save_every = "auto"``: the first save of an attempt comes this many steps after its start
(or its restored step), to measure what a save costs before the cadence is chosen."""

HF_AUTO_STEP_SAMPLES = 32
"""``save_every = "auto"``: the step time saves are weighed against is the mean of this many
recent steps trained without a save in flight (``HF_AUTO_STEP_OUTLIER`` leaves some out)."""

HF_AUTO_AIM = 0.8
"""``save_every = "auto"``: the share of ``max_save_overhead`` the cadence is chosen for; the
rest is room for the error of each save's measured cost (the bound is a ceiling)."""

HF_AUTO_WARMUP_STEPS = 3
"""``save_every = "auto"``: the first steps of an attempt are slower than the rest (caches,
allocations): the intervals that end within this many steps of its start are not step-time
samples."""

HF_AUTO_FRESH_STEPS = 8
"""``save_every = "auto"``: a save is weighed once this many steps trained after its
measurement ended without a save in flight, so the step time it is weighed against includes
steps on both sides of it (the next periodic save waits for them)."""

HF_AUTO_STEP_OUTLIER = 4.0
"""``save_every = "auto"``: a step that took this many times the median step or more (an
evaluation, the machine paused) is left out of the step time saves are weighed against."""

HF_AUTO_COMMIT_WAIT_S = 60.0
"""``save_every = "auto"``: once a save is written, its measurement waits at most this long for
the runner's commit (a lost runner, a failed capture), so periodic saves never stop for one."""

HF_AUTO_SETTLE_STEPS = 5
"""``save_every = "auto"``: a save's measurement goes on this many steps after its commit,
which costs training too: the integration then removes the older checkpoint folder and the
runner's retention deletes older snapshots' files."""

HF_AUTO_COST_WEIGHT = 0.5
"""``save_every = "auto"``: weight of the newest save's measured cost in the running estimate."""

HF_AUTO_RETUNE_MARGIN = 0.2
"""``save_every = "auto"``: a cadence within the bound gives way to a more frequent one only
when that is at least this share shorter, so measurement noise does not retune every save."""

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
        # What the cadence is chosen for: the bound is a ceiling, and each cost is an estimate.
        self._aim = bound * HF_AUTO_AIM
        self.every = HF_AUTO_FIRST_EVERY
        self._anchor = anchor  # the step of the previous save, or where the attempt started
        self._start = anchor  # where the attempt started: the bound's account begins here
        self._spent = 0.0  # the measured cost of this attempt's saves so far, seconds
        self._report = report
        self._clock = clock or time.perf_counter
        self._last: tuple[int, float] | None = None  # (step, time) of the previous boundary
        self._undisturbed: deque[float] = deque(maxlen=HF_AUTO_STEP_SAMPLES)
        self._measuring: _Measure | None = None
        self._cost: float | None = None  # running estimate of one save's cost, seconds
        self._chosen = False  # still on the first, measuring cadence
        report(self.every, None, anchor)

    def boundary(self, step: int, writing: bool, committed: int) -> None:
        """An optimizer boundary at ``step``; ``writing``: a save is being written right now;
        ``committed``: the newest step the runner has committed (-1: none)."""
        now = self._clock()
        last = self._last
        if last is not None and last[0] == step:
            return  # an epoch end, right after its step's own boundary: no step trained
        self._last = (step, now)
        if last is None:
            return  # the attempt's first boundary: no interval ended here
        interval = now - last[1]
        measuring = self._measuring
        if measuring is None or measuring.ended:
            self._undisturbed_step(step, interval, measuring)
            return
        measuring.intervals.append(interval)
        if writing:
            return
        if measuring.written_at is None:
            measuring.written_at = now
        if measuring.committed_at is None and committed >= measuring.step:
            measuring.committed_at = step
        settled = (
            measuring.committed_at is not None
            and step - measuring.committed_at >= HF_AUTO_SETTLE_STEPS
        )
        if settled or now - measuring.written_at >= HF_AUTO_COMMIT_WAIT_S:
            measuring.ended = True  # committed and settled: all it cost is in its intervals

    def _undisturbed_step(self, step: int, interval: float, measuring: _Measure | None) -> None:
        """A step trained with no save in flight: a sample of the step time (past the attempt's
        first, slower steps). A save whose intervals ended is weighed once ``FRESH_STEPS`` such
        samples followed it, so the step time brackets it instead of going stale before it."""
        if step - self._start > HF_AUTO_WARMUP_STEPS:
            self._undisturbed.append(interval)
        if measuring is None:
            return
        measuring.fresh += 1
        if measuring.fresh >= HF_AUTO_FRESH_STEPS:
            self._measuring = None
            self._measured(measuring, step)

    def due(self, step: int) -> bool:
        """A periodic save is due: ``every`` steps since the previous save, and that save is
        committed (still measured means it was in flight at this boundary)."""
        return self._measuring is None and step - self._anchor >= self.every

    def saved(self, step: int, stall_s: float) -> None:
        """A save was taken at ``step``, stalling training ``stall_s``; its cost is measured
        until the runner has committed it."""
        self._anchor = step
        # One still measured (a save at an epoch end or on request came first) is measured
        # together with this one: what both cost shows in the same intervals.
        self._measuring = _Measure(step, stall_s, self._measuring)

    def _measured(self, measure: _Measure, step: int) -> None:
        written_in = step - measure.step  # steps until the save was committed and weighed
        if len(self._undisturbed) < _MIN_STEP_SAMPLES:
            self._choose(step, max(self.every, written_in), None)  # no step time to weigh by
            return
        step_s = self._step_time()
        # The stall alone is timed directly: on a busy machine the intervals' excess can read
        # as less than it, or as nothing, and a save is never free.
        excess = sum(measure.intervals) - step_s * len(measure.intervals)
        cost = max(measure.stall_s, excess)
        self._spent += cost
        weight = HF_AUTO_COST_WEIGHT
        self._cost = cost if self._cost is None else weight * cost + (1 - weight) * self._cost
        within = max(1, math.ceil(self._cost / (self._aim * step_s) - 1e-9))
        best = max(within, written_in, self._paid_from(step_s) - measure.step)
        if self._chosen and self.every * (1 - HF_AUTO_RETUNE_MARGIN) < best < self.every:
            best = self.every  # more frequent only when clearly so: noise must not retune
        first, self._chosen = not self._chosen, True
        self._choose(step, best, self._cost / (best * step_s), always=first)

    def _step_time(self) -> float:
        """What a step takes without a save in flight: the mean of the recent undisturbed
        intervals, the rare far longer ones left out (an evaluation, the machine paused).

        A mean, not a median: a save's intervals are weighed against it, and on a busy machine
        the median step can be slower than the average one, which would hide part of a save's
        cost (and on a quiet one faster, which would only overstate it)."""
        typical = statistics.median(self._undisturbed)
        usual = [s for s in self._undisturbed if s <= HF_AUTO_STEP_OUTLIER * typical]
        return statistics.fmean(usual)

    def _paid_from(self, step_s: float) -> int:
        """The first step at which the training since the attempt started pays, within the
        bound, for every save so far and one more at the estimated cost."""
        owed = (self._spent + (self._cost or 0.0)) / (self._aim * step_s)
        return self._start + math.ceil(owed - 1e-9)

    def _choose(self, step: int, every: int, overhead: float | None, always: bool = False) -> None:
        """Take ``every`` from ``step`` on; a change (or the first measured choice) is reported."""
        if every != self.every or always:
            self.every = every
            self._report(every, None if overhead is None else round(overhead, 4), step)


class _Measure:
    """One save being measured: the boundary intervals since it was taken."""

    def __init__(self, step: int, stall_s: float, overlapped: _Measure | None = None) -> None:
        self.step = step
        self.stall_s = stall_s
        self.intervals: list[float] = []
        if overlapped is not None:
            self.stall_s += overlapped.stall_s
            self.intervals = overlapped.intervals
        self.written_at: float | None = None  # the boundary that found its write finished
        self.committed_at: int | None = None  # the step whose boundary found it committed
        self.ended = False  # its intervals are over: the steps since are undisturbed
        self.fresh = 0  # undisturbed steps trained since then
