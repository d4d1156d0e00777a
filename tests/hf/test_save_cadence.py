"""``save_every = "auto"``: the integration measures its saves and picks the cadence (issue 17).

The choice itself is a pure rule over the times between optimizer boundaries, so it is driven
here with a training loop of known step times (a clock the loop advances); the end-to-end test
runs the quick-start under a real `nodus run` and checks what a user can read afterwards: the
``save_cadence`` events and the steps of the committed snapshots. No test asserts a duration.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from runner_e2e_helpers import Project

from nodus import protocol
from nodus.stages.hf.inprocess import cadence
from nodus.stages.hf.inprocess.cadence import AutoCadence

FIRST = cadence.HF_AUTO_FIRST_EVERY
SETTLE = cadence.HF_AUTO_SETTLE_STEPS
FRESH = cadence.HF_AUTO_FRESH_STEPS
# The cadence is chosen for HF_AUTO_AIM of the bound: the tests below give a bound that aims at
# 3.5%, the figures they work out are for that.
BOUND = 0.035 / cadence.HF_AUTO_AIM


def aimed(loop: Loop) -> float:
    return loop.cadence.bound * cadence.HF_AUTO_AIM


class Loop:
    """A training loop as the session drives the cadence: step, boundary, maybe save.

    Each step takes ``step_s``; a save stalls the boundary by ``stall_s`` and is written during
    the next ``write_steps`` steps, each slowed by ``slowdown_s``; then the runner captures it
    during ``commit_steps`` more, each slowed by ``capture_s``, and commits it (never, when
    ``commits`` is False: a lost runner).
    """

    def __init__(self, bound: float = BOUND, anchor: int = 0) -> None:
        self.now = 0.0
        self.step = anchor
        self.events: list[tuple[int, float | None, int]] = []
        self.saves: list[int] = []
        self.cadence = AutoCadence(bound, anchor, self._report, clock=lambda: self.now)
        self.committed = -1  # what committed.json says
        self.undisturbed = 0.0  # what the steps trained so far took without any save
        self._writing = 0
        self._capturing = 0
        self._saved = -1

    def _report(self, every: int, overhead: float | None, step: int) -> None:
        self.events.append((every, overhead, step))

    def train(
        self,
        steps,
        step_s=0.1,
        stall_s=0.05,
        slowdown_s=0.01,
        write_steps=2,
        commit_steps=0,
        capture_s=0.0,
        commits=True,
    ):
        for _ in range(steps):
            self.step += 1
            # A sequence of step times: a step's own time, whatever the saves add to it.
            step_time = step_s[self.step % len(step_s)] if isinstance(step_s, tuple) else step_s
            self.undisturbed += step_time
            if self._writing:
                self.now += step_time + slowdown_s
                self._writing -= 1
            elif self._capturing:
                self.now += step_time + capture_s
                self._capturing -= 1
            else:
                self.now += step_time
            if not self._writing and not self._capturing and commits:
                self.committed = self._saved
            self.cadence.boundary(self.step, self._writing > 0, self.committed)
            if self.cadence.due(self.step):
                self.now += stall_s
                self.saves.append(self.step)
                self.cadence.saved(self.step, stall_s)
                self._saved = self.step
                self._writing, self._capturing = write_steps, commit_steps


def paid_for(loop: Loop, cost: float, step_s: float = 0.1) -> bool:
    """At every save, the saves so far (that one included) cost at most the bound's share of
    the training since the attempt started: the bound holds over the whole run."""
    start = loop.saves[0] - FIRST
    return all(
        (number + 1) * cost <= aimed(loop) * (step - start) * step_s + 1e-9
        for number, step in enumerate(loop.saves)
        if number > 0  # the first, measuring save is taken before anything is known
    )


def test_the_first_save_measures_then_the_most_frequent_cadence_within_the_bound_is_taken():
    loop = Loop(bound=BOUND)
    loop.train(200)
    # A save costs 0.05 s of stall + 2 steps slowed by 0.01 s = 0.07 s; steps take 0.1 s:
    # every k steps costs 0.07 / (0.1 k), within 3.5% from k = 20 on. The measuring save is
    # paid for first: the next save waits until the training since the start covers both.
    assert loop.events[0] == (FIRST, None, 0)
    # Chosen once the first is committed (when its write ended), settled, and FRESH steps
    # without a save followed it to weigh it against.
    assert loop.events[1][::2] == (40 - FIRST, FIRST + 2 + SETTLE + FRESH)
    every, overhead, step = loop.events[2]
    assert (every, step) == (20, 42 + SETTLE + FRESH)
    assert overhead == pytest.approx(0.035)
    assert loop.saves == [FIRST, 40, *range(60, 201, 20)]
    assert paid_for(loop, cost=0.07)


def test_the_cadence_is_chosen_for_a_share_of_the_bound():
    loop = Loop(bound=0.035)
    loop.train(300)
    # A save costs 0.07 s and steps take 0.1 s: within 3.5% every 20 steps, but the cadence
    # leaves room for the error of the measured cost.
    every = math.ceil(0.07 / (0.1 * 0.035 * cadence.HF_AUTO_AIM))
    assert loop.events[-1][:2] == (every, pytest.approx(0.07 / (0.1 * every), abs=1e-4))
    assert every > 20


def test_the_runners_capture_counts_until_the_save_is_committed():
    loop = Loop(bound=BOUND)
    # After the 2-step write the runner captures for 3 steps, each slowed by 0.02 s: a save
    # costs 0.05 + 2 * 0.01 + 3 * 0.02 = 0.13 s, so every 38 steps (0.13 / 0.0035 = 37.1).
    loop.train(400, commit_steps=3, capture_s=0.02)
    assert loop.events[-1][:2] == (38, pytest.approx(0.13 / 3.8, abs=1e-4))
    # Measured until the commit and SETTLE steps more, not until the write's end.
    assert loop.events[1][2] == FIRST + 5 + SETTLE + FRESH
    assert paid_for(loop, cost=0.13)


def test_the_bound_holds_when_most_steps_are_slower_than_the_average():
    # On a busy machine step times scatter unevenly: here a third of the steps are fast, so the
    # median step (0.14 s) is longer than the mean (0.1 s), and weighing a save's intervals
    # against the median would hide most of what it cost (the run took 1.12x).
    scatter = random.Random(17)
    times = tuple(scatter.choice((0.02, 0.14, 0.14)) for _ in range(3000))
    loop = Loop(bound=BOUND)
    loop.train(3000, step_s=times, stall_s=0.01, commit_steps=2, capture_s=0.02)
    assert loop.now <= (1 + 0.035) * loop.undisturbed
    assert len(loop.saves) > 20  # and it saved all along


def test_a_far_longer_step_is_not_taken_for_the_step_time():
    # An evaluation (3 s) just before the first save: counted in the step time, it would make
    # that save look free; left out, the first choice is what it is without it.
    times = tuple(3.0 if step == 3 else 0.1 for step in range(100))
    evaluated, plain = Loop(bound=BOUND), Loop(bound=BOUND)
    evaluated.train(60, step_s=times)
    plain.train(60)
    assert evaluated.events[1][:2] == plain.events[1][:2] == (40 - FIRST, 0.02)


def test_the_slower_first_steps_of_an_attempt_are_not_taken_for_the_step_time():
    # Caches and allocations make an attempt's first steps slower; counted in the step time
    # the first save is weighed against, they would make it look cheaper than its 0.07 s.
    times = tuple(0.3 if step <= cadence.HF_AUTO_WARMUP_STEPS else 0.1 for step in range(100))
    warming, plain = Loop(bound=BOUND), Loop(bound=BOUND)
    warming.train(60, step_s=times)
    plain.train(60)
    assert warming.events[1][:2] == plain.events[1][:2] == (40 - FIRST, 0.02)


def test_a_save_is_weighed_against_the_steps_on_both_sides_of_it():
    # The machine gets faster while the first save is measured: the steps before it alone
    # would make its intervals look cheaper than they were, and the save look almost free.
    times = tuple(0.12 if step <= FIRST else 0.1 for step in range(400))
    loop = Loop(bound=BOUND)
    loop.train(300, step_s=times)
    # Weighed against 0.12 s it would read as its stall (0.05 s): every 15 steps, 4.7% of the
    # training once the machine is at 0.1 s. The steps after it weigh it closer to its cost.
    assert loop.events[1][0] >= 20
    assert loop.now <= (1 + 0.035) * loop.undisturbed


def test_costlier_saves_make_the_cadence_longer_as_the_run_goes():
    loop = Loop(bound=BOUND)
    loop.train(60)
    loop.train(1000, stall_s=0.25)  # saves now cost 0.27 s; the estimate follows save by save
    everies = [every for every, _, _ in loop.events]
    assert everies[:3] == [FIRST, 40 - FIRST, 20]
    assert all(every > 20 for every in everies[3:])  # longer at once, the first costly save
    # 0.27 / (0.1 * 0.035) = 77.1: every 78 steps, or a little longer while the saves taken
    # before the estimate caught up are paid for (then kept: within the retune margin).
    assert 78 <= everies[-1] < 78 / (1 - cadence.HF_AUTO_RETUNE_MARGIN)
    assert all(overhead <= 0.035 + 1e-9 for _, overhead, _ in loop.events[1:])
    spent = sum(0.07 if step <= 60 else 0.27 for step in loop.saves)
    assert spent <= 0.035 * loop.step * 0.1  # and over the whole run


def test_a_cadence_is_never_shorter_than_a_save_takes_to_be_committed():
    loop = Loop(bound=0.5)  # the bound alone would allow a save every 2 steps
    loop.train(60, write_steps=4, commit_steps=3)
    # The first save was committed 7 steps after it was taken, measured SETTLE more, and
    # weighed FRESH steps later.
    assert loop.events[1][0] == 7 + SETTLE + FRESH
    gaps = {b - a for a, b in zip(loop.saves, loop.saves[1:], strict=False)}
    assert gaps == {7 + SETTLE + FRESH}


def test_a_runner_that_never_commits_does_not_stop_the_saves():
    loop = Loop(bound=BOUND)
    loop.train(2000, commits=False)
    # Each measurement ends HF_AUTO_COMMIT_WAIT_S (600 steps of 0.1 s) after its write and is
    # weighed FRESH steps later.
    wait = int(cadence.HF_AUTO_COMMIT_WAIT_S / 0.1) + FRESH
    gaps = [b - a for a, b in zip(loop.saves, loop.saves[1:], strict=False)]
    assert len(gaps) >= 2 and all(wait <= gap <= wait + 3 for gap in gaps)


def test_saves_outside_the_cadence_are_paid_for_too():
    loop = Loop(bound=BOUND)
    for _ in range(20):  # epochs of 30 steps, each ending with a save the user asked for
        loop.train(29)
        loop.step += 1
        loop.now += 0.1 + 0.05
        loop.cadence.boundary(loop.step, False, loop.committed)
        loop.cadence.saved(loop.step, 0.05)
        loop.saves.append(loop.step)
        loop.committed = loop.step  # written and committed at once: it costs its stall
    # 0.05 s every 30 steps uses 0.05 / 3 = 1.7% of the 3.5%; the periodic saves take the rest.
    periodic = len(loop.saves) - 20
    spent = 20 * 0.05 + periodic * 0.07
    assert periodic > 0 and spent <= 0.035 * loop.step * 0.1


def test_noise_does_not_retune_but_a_clearly_cheaper_save_does():
    loop = Loop(bound=BOUND)
    loop.train(60)
    loop.train(100, stall_s=0.045)  # a little cheaper: still 19 steps, kept at 20
    assert [every for every, _, _ in loop.events] == [FIRST, 40 - FIRST, 20]
    # Saves cost nothing now: as often as one is committed (2 steps), measured to the end and
    # weighed, or (the retune margin) a little less often.
    loop.train(200, stall_s=0.0, slowdown_s=0.0)
    fastest = 2 + SETTLE + FRESH
    assert fastest <= loop.events[-1][0] <= fastest / (1 - cadence.HF_AUTO_RETUNE_MARGIN)


def test_a_save_is_never_measured_as_cheaper_than_its_stall():
    loop = Loop(bound=BOUND)
    # Noise makes the steps after the save look faster than the median: the intervals alone
    # would say the 0.05 s stall cost 0.01 s.
    loop.train(100, slowdown_s=-0.02)
    assert loop.events[-1][0] == 15  # 0.05 / (0.1 * 0.035) = 14.3: every 15 steps


def test_a_resumed_attempt_counts_from_its_restored_step():
    loop = Loop(anchor=40)
    loop.train(10)
    assert loop.events[0] == (FIRST, None, 40)
    assert loop.saves[0] == 40 + FIRST


@pytest.mark.hf
@pytest.mark.slow
def test_a_run_with_auto_records_its_cadences_and_saves_on_them(tmp_path):
    bound = 0.5  # generous, so the 144 steps hold several saves whatever the machine's speed
    project = Project(
        tmp_path,
        save_every=protocol.SAVE_EVERY_AUTO,
        write_delay="0",
        execution={"save_each_epoch": False, "max_save_overhead": bound},
        # Long enough for the first save to be committed and weighed on a fast machine too
        # (the runner looks every 0.2 s; the quick-start's steps take a few milliseconds).
        env={"QUICKSTART_EPOCHS": "12"},
    )
    proc = project.nodus("run", str(project.file), "--key", "auto", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    log = project.get("auto")["events"]
    events = [e for e in log if e["type"] == "save_cadence"]
    assert (events[0]["every"], events[0]["overhead"], events[0]["step"]) == (FIRST, None, 0)
    measured = events[1:]
    assert measured, "no cadence was chosen from a measured save"
    assert all(e["every"] >= 1 and 0 <= e["overhead"] <= bound for e in measured)
    steps = project.committed_steps("auto")
    assert steps[0] == FIRST and steps[-1] == 144  # the final save ends the run
    for before, after in itertools.pairwise(steps[:-1]):  # the final save is no cadence's
        in_force = [e["every"] for e in events if e["step"] <= after][-1]
        assert after - before == in_force, (steps, events)
    # A save is measured until the runner has committed it: each choice follows that commit.
    for choice in measured:
        save = max(step for step in steps if step < choice["step"])
        commit = next(e for e in log if e["type"] == "snapshot_committed" and e["step"] == save)
        assert log.index(commit) < log.index(choice), (save, choice)
