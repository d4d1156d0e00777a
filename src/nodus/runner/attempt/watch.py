"""An attempt's hang watch: the progress its program makes, as the poll loop sees it.

``[execution] hang_timeout``. Each look (once per poll) tells the attempt's
:class:`~nodus.runner.recovery.hangs.ProgressClock` what progressed since the last one:

    a line of output          counted by the output thread, at the time the line arrived
    a training step           ``.nodus/progress.json`` rewritten (hf-trainer-v1, the managed
                              methods; at most every ``protocol.PROGRESS_EVERY_S``)
    a save, a commit          a save record read, a snapshot committed by the capture loop
    a write into the selection  its names, sizes or mtimes changed: walked only once the
                              program has been quiet for a while (at most every
                              ``WALK_EVERY_MAX_S``), and always before a hang is declared

and asks the clock whether the program hangs. What follows a hang is the attempt's
(:meth:`nodus.runner.attempt.supervise.Supervision._hung`): the event, the tree ended, the outcome.
"""

from __future__ import annotations

import json
import os
import time

from nodus import protocol
from nodus.runner.attempt.role import CaptureLoop
from nodus.runner.capture.selection import fingerprint
from nodus.runner.processes.stage_process import StageProcess
from nodus.runner.recovery.hangs import Hang, ProgressClock
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults

__all__ = ["WALK_EVERY_MAX_S", "Watch"]

WALK_EVERY_MAX_S = 30.0
"""A quiet program's selection is walked at most this often (a quarter of the timeout, when
shorter, but not more often than the poll): what a write costs to see."""


def _ms(monotonic_s: float) -> int:
    return round(monotonic_s * 1000)


class Watch:
    """The hang watch of one attempt's running program."""

    def __init__(
        self,
        setting: float | str,
        ws: Workspace,
        paths: list[str],
        capturer: CaptureLoop,
        process: StageProcess,
        longest_ms: int | None = None,
    ) -> None:
        self.off = setting == defaults.HANG_TIMEOUT_OFF
        self.ws = ws
        self.paths = paths
        self.capturer = capturer
        self.process = process
        self.clock = ProgressClock(setting, _ms(time.monotonic()), longest_ms)
        self.started_wall = time.time()  # a progress.json older than this is an earlier attempt's
        self.progress: protocol.Progress | None = None  # the last step report read
        self._lines = 0
        self._commits = 0
        self._records = 0
        self._progress_version: tuple[int, int] | None = None
        self._selection: tuple[object, ...] | None = None
        self._walked = float("-inf")
        if not self.off:  # (a capture loop that captures nothing is watched by none)
            self._commits = capturer.commits
            self._records = capturer.records_read
            self._selection = self._walk()

    def look(self) -> Hang | None:
        """What progressed since the last look; a :class:`Hang` when the program hangs."""
        if self.off:
            return None
        lines, at = self.process.output_lines, self.process.output_at
        if lines != self._lines and at is not None:
            self._lines = lines
            self.clock.progressed(_ms(at), "a line of output", training=False)
        now = time.monotonic()
        self._step_report(now)
        if self.capturer.records_read != self._records:
            self._records = self.capturer.records_read
            self.clock.progressed(_ms(now), "a save", training=True)
        if self.capturer.commits != self._commits:
            self._commits = self.capturer.commits
            step = self.capturer.last_step
            self.clock.progressed(_ms(now), f"the snapshot of step {step}", training=True)
        quiet_s = now - self.clock.last.at_ms / 1000
        if quiet_s >= self._walk_every() and now - self._walked >= self._walk_every():
            self._written(now)
        hang = self.clock.hang(_ms(now))
        if hang is not None and now - self._walked > defaults.POLL_S and self._written(now):
            return None  # a write it had not looked for yet
        return hang

    def final_snapshot(self) -> int | None:
        """The step of the program's final snapshot, when it reported that training ended and
        the snapshot of that step is committed (or was restored); None otherwise."""
        self._step_report(time.monotonic())
        progress = self.progress
        if progress is None or not progress.ended:
            return None
        committed = self.capturer.committed_id is not None
        return progress.step if committed and self.capturer.last_step == progress.step else None

    @property
    def longest_ms(self) -> int | None:
        return self.clock.longest_ms

    def _walk_every(self) -> float:
        timeout = self.clock.timeout_ms()
        quarter = WALK_EVERY_MAX_S if timeout is None else timeout / 4000
        return max(defaults.POLL_S, min(WALK_EVERY_MAX_S, quarter))

    def _step_report(self, now: float) -> None:
        path = self.ws.control.progress
        try:
            stat = os.stat(path)
        except OSError:
            return
        version = (stat.st_mtime_ns, stat.st_size)
        if version == self._progress_version:
            return
        self._progress_version = version
        try:
            with open(path, encoding="utf-8") as handle:
                progress = protocol.Progress.from_dict(json.load(handle))
        except (OSError, ValueError, KeyError, TypeError):
            self._progress_version = None  # being written: read it at the next look
            return
        if progress.at < self.started_wall:
            return  # an earlier attempt's
        self.progress = progress
        self.capturer.reported(progress.step)  # below a restored step: it started over
        self.clock.progressed(_ms(now), f"step {progress.step}", training=True)

    def _written(self, now: float) -> bool:
        """Whether the selection changed since the last walk (then it is progress now)."""
        self._walked = now
        current = self._walk()
        if current == self._selection:
            return False
        self._selection = current
        self.clock.progressed(_ms(now), "a write into the selection", training=True)
        return True

    def _walk(self) -> tuple[object, ...]:
        try:
            return fingerprint(self.ws.copy, self.paths, [])
        except OSError:
            return ()
