"""``hang_timeout``'s pure side (:mod:`nodus.runner.recovery.hangs`), as tables in milliseconds."""

from __future__ import annotations

import pytest

from nodus.runner.recovery.hangs import FACTOR, FLOOR_MS, STARTUP_MS, ProgressClock, timeout_ms
from nodus.schemas import defaults

S = 1000
MIN = 60 * S


def test_the_numbers_are_the_documented_ones():
    assert (STARTUP_MS, FACTOR, FLOOR_MS) == (30 * MIN, 5, 10 * MIN)
    assert defaults.HANG_TIMEOUT == "auto"


@pytest.mark.parametrize(
    ("setting", "trained", "longest_ms", "expected"),
    [
        # off: never
        ("off", False, None, None),
        ("off", True, 1 * S, None),
        # auto at start-up, or before an interval of training was seen: the allowance
        ("auto", False, None, STARTUP_MS),
        ("auto", False, 2 * S, STARTUP_MS),
        ("auto", True, None, STARTUP_MS),
        # auto after start-up: FACTOR times the longest interval, never below the floor
        ("auto", True, 1 * S, FLOOR_MS),
        ("auto", True, 2 * MIN, FLOOR_MS),
        ("auto", True, 3 * MIN, 15 * MIN),
        ("auto", True, 20 * MIN, 100 * MIN),
        # a duration: itself once training progressed, at least the allowance at start-up
        (3.0, True, None, 3 * S),
        (3.0, True, 20 * MIN, 3 * S),
        (0.5, True, None, 500),
        (3.0, False, None, STARTUP_MS),
        (3600.0, False, None, 60 * MIN),
        (3600.0, True, 1 * S, 60 * MIN),
    ],
)
def test_the_timeout_now(setting, trained, longest_ms, expected):
    assert timeout_ms(setting, trained, longest_ms) == expected


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="hang_timeout"):
        timeout_ms("soon", True, None)


# (signals as (at_ms, what, training), now_ms) -> (hang or None as (quiet_ms, timeout_ms, last))
CASES = [
    # a duration of 3 s: quiet for 2999 ms after a save is no hang; 3000 ms is
    (3.0, [(1000, "a save", True)], 3999, None),
    (3.0, [(1000, "a save", True)], 4000, (3000, 3000, "a save")),
    # output keeps it alive: the last line counts
    (3.0, [(1000, "a save", True), (3500, "a line of output", False)], 6000, None),
    (
        3.0,
        [(1000, "a save", True), (3500, "a line of output", False)],
        6500,
        (3000, 3000, "a line of output"),
    ),
    # at start-up (no training progress yet) a duration waits the allowance
    (3.0, [(500, "a line of output", False)], 500 + STARTUP_MS - 1, None),
    (
        3.0,
        [(500, "a line of output", False)],
        500 + STARTUP_MS,
        (STARTUP_MS, STARTUP_MS, "a line of output"),
    ),
    # nothing at all since the start (0): the allowance, "none since the start"
    ("auto", [], STARTUP_MS, (STARTUP_MS, STARTUP_MS, "none since the start")),
    # auto: steps every second, the floor applies
    ("auto", [(t * S, f"step {t}", True) for t in range(1, 6)], 5 * S + FLOOR_MS - 1, None),
    (
        "auto",
        [(t * S, f"step {t}", True) for t in range(1, 6)],
        5 * S + FLOOR_MS,
        (FLOOR_MS, FLOOR_MS, "step 5"),
    ),
    # auto: an evaluation of 4 min between steps: 20 min from the last progress
    (
        "auto",
        [(1 * S, "step 1", True), (1 * S + 4 * MIN, "step 2", True)],
        1 * S + 24 * MIN - 1,
        None,
    ),
    (
        "auto",
        [(1 * S, "step 1", True), (1 * S + 4 * MIN, "step 2", True)],
        1 * S + 24 * MIN,
        (20 * MIN, 20 * MIN, "step 2"),
    ),
    # start-up's own silence is not an interval of training: 25 min to the first step
    (
        "auto",
        [(25 * MIN, "step 1", True), (25 * MIN + S, "step 2", True)],
        25 * MIN + S + FLOOR_MS,
        (FLOOR_MS, FLOOR_MS, "step 2"),
    ),
    # a signal seen late (older than the last) changes nothing
    (
        3.0,
        [(5000, "a save", True), (4000, "a line of output", False)],
        8000,
        (3000, 3000, "a save"),
    ),
    # off: never
    ("off", [(1000, "a save", True)], 10**12, None),
]


@pytest.mark.parametrize(("setting", "signals", "now_ms", "expected"), CASES)
def test_a_hang_or_not(setting, signals, now_ms, expected):
    clock = ProgressClock(setting, 0)
    for at_ms, what, training in signals:
        clock.progressed(at_ms, what, training)
    hang = clock.hang(now_ms)
    got = None if hang is None else (hang.quiet_ms, hang.timeout_ms, hang.last)
    assert got == expected


def test_the_longest_interval_carries_into_a_recovered_attempt():
    """A restored attempt's start-up gets the allowance; after its first training progress the
    stage's longest interval applies at once."""
    first = ProgressClock("auto", 0)
    for at_ms in (1 * S, 1 * S + 3 * MIN, 1 * S + 3 * MIN + S):
        first.progressed(at_ms, "step", True)
    assert first.longest_ms == 3 * MIN
    second = ProgressClock("auto", 0, first.longest_ms)
    assert second.timeout_ms() == STARTUP_MS
    second.progressed(40 * S, "the snapshot of step 40", True)
    assert second.timeout_ms() == 15 * MIN
    assert second.hang(40 * S + 15 * MIN) is not None
    assert second.hang(40 * S + 15 * MIN - 1) is None
