"""``save_every = "auto"``: the integration measures its saves and picks the cadence (issue 17).

The choice itself is a pure rule over the times between optimizer boundaries, so it is driven
here with a training loop of known step times (a clock the loop advances); the end-to-end test
runs the quick-start under a real `nodus run` and checks what a user can read afterwards: the
``save_cadence`` events and the steps of the committed snapshots. No test asserts a duration.
"""

from __future__ import annotations

import pytest
from runner_e2e_helpers import Project

from nodus import protocol
from nodus.schemas import defaults
from nodus.stages.hf.inprocess.cadence import AutoCadence

FIRST = defaults.HF_AUTO_FIRST_EVERY


class Loop:
    """A training loop as the session drives the cadence: step, boundary, maybe save.

    Each step takes ``step_s``; a save stalls the boundary by ``stall_s`` and is written during
    the next ``write_steps`` steps, each slowed by ``slowdown_s``.
    """

    def __init__(self, bound: float = 0.035, anchor: int = 0) -> None:
        self.now = 0.0
        self.step = anchor
        self.events: list[tuple[int, float | None, int]] = []
        self.saves: list[int] = []
        self.cadence = AutoCadence(bound, anchor, self._report, clock=lambda: self.now)
        self._writing = 0

    def _report(self, every: int, overhead: float | None, step: int) -> None:
        self.events.append((every, overhead, step))

    def train(self, steps, step_s=0.1, stall_s=0.05, slowdown_s=0.01, write_steps=2):
        for _ in range(steps):
            self.step += 1
            self.now += step_s + (slowdown_s if self._writing else 0.0)
            self._writing = max(0, self._writing - 1)
            self.cadence.boundary(self.step, writing=self._writing > 0)
            if self.cadence.due(self.step):
                self.now += stall_s
                self.saves.append(self.step)
                self.cadence.saved(self.step, stall_s)
                self._writing = write_steps


def test_the_first_save_measures_then_the_most_frequent_cadence_within_the_bound_is_taken():
    loop = Loop(bound=0.035)
    loop.train(60)
    # A save costs 0.05 s of stall + 2 steps slowed by 0.01 s = 0.07 s; steps take 0.1 s:
    # every k steps costs 0.07 / (0.1 k), within 3.5% from k = 20 on.
    assert loop.events[0] == (FIRST, None, 0)
    every, overhead, step = loop.events[1]
    assert (every, step) == (20, FIRST + 2)  # chosen once the first save's write had finished
    assert overhead == pytest.approx(0.035)
    assert loop.saves == [FIRST, FIRST + 20, FIRST + 40]


def test_costlier_saves_make_the_cadence_longer_as_the_run_goes():
    loop = Loop(bound=0.035)
    loop.train(30)
    loop.train(1000, stall_s=0.25)  # saves now cost 0.27 s; the estimate follows save by save
    everies = [every for every, _, _ in loop.events]
    assert everies[:2] == [FIRST, 20]
    assert everies[2:] == sorted(everies[2:]) and everies[2] > 20
    assert everies[-1] == 78  # 0.27 / (0.1 * 0.035) = 77.1: every 78 steps
    assert all(overhead <= 0.035 + 1e-9 for _, overhead, _ in loop.events[1:])


def test_a_cadence_is_never_shorter_than_a_write_takes():
    loop = Loop(bound=0.5)  # the bound alone would allow a save every 2 steps
    loop.train(40, write_steps=7)
    assert loop.events[1][0] == 7  # the write of the first save took 7 steps
    gaps = {b - a for a, b in zip(loop.saves, loop.saves[1:], strict=False)}
    assert gaps == {7}


def test_noise_does_not_retune_but_a_clearly_cheaper_save_does():
    loop = Loop(bound=0.035)
    loop.train(30)
    loop.train(100, stall_s=0.045)  # a little cheaper: still 19 steps, kept at 20
    assert [every for every, _, _ in loop.events] == [FIRST, 20]
    loop.train(200, stall_s=0.0, slowdown_s=0.0)  # saves cost nothing now: every 2 steps
    assert loop.events[-1][0] == 2


def test_a_save_is_never_measured_as_cheaper_than_its_stall():
    loop = Loop(bound=0.035)
    # Noise makes the steps after the save look faster than the median: the intervals alone
    # would say the 0.05 s stall cost 0.01 s.
    loop.train(30, slowdown_s=-0.02)
    assert loop.events[1][0] == 15  # 0.05 / (0.1 * 0.035) = 14.3: every 15 steps


def test_a_resumed_attempt_counts_from_its_restored_step():
    loop = Loop(anchor=40)
    loop.train(10)
    assert loop.events[0] == (FIRST, None, 40)
    assert loop.saves[0] == 40 + FIRST


@pytest.mark.hf
@pytest.mark.slow
def test_a_run_with_auto_records_its_cadences_and_saves_on_them(tmp_path):
    bound = 0.5  # generous, so the 48 steps hold several saves whatever the machine's speed
    project = Project(
        tmp_path,
        save_every=protocol.SAVE_EVERY_AUTO,
        write_delay="0",
        execution={"save_each_epoch": False, "max_save_overhead": bound},
    )
    proc = project.nodus("run", str(project.file), "--key", "auto", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    events = [e for e in project.get("auto")["events"] if e["type"] == "save_cadence"]
    assert (events[0]["every"], events[0]["overhead"], events[0]["step"]) == (FIRST, None, 0)
    measured = events[1:]
    assert measured, "no cadence was chosen from a measured save"
    assert all(e["every"] >= 1 and 0 <= e["overhead"] <= bound for e in measured)
    steps = project.committed_steps("auto")
    assert steps[0] == FIRST and steps[-1] == 48  # the final save ends the run
    for before, after in zip(steps, steps[1:-1], strict=False):
        in_force = [e["every"] for e in events if e["step"] <= after][-1]
        assert after - before == in_force, (steps, events)
