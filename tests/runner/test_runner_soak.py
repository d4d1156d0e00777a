"""Soak: kill the program and the runner at random points, many times; nothing committed is lost.

Each round SIGKILLs either the stage program (the runner recovers by itself) or the runner
(its program dies with it; `nodus run --key` recovers). At the end the run must have succeeded
with the result of an uninterrupted run, every snapshot ever seen committed must still be listed
and sound, and every recovery must have restored at least the newest step committed before it.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from runner_helpers import pid_alive, running_attempt

from nodus.store import deletion
from nodus.testing.counter import expected_value
from polling import wait_for

KILLS, STEPS = 30, 2000


@pytest.mark.slow
def test_random_kills_of_program_and_runner_lose_nothing_committed(project):
    project.write(
        steps=STEPS,
        save_every=5,
        sleep=0.01,
        body="[execution]\nmax_recoveries = 1000\n",
        gated=True,
    )
    rng = random.Random(2026)
    store = project.store()
    runner = project.start("run", "workload.toml", "--key", "soak")
    run_id = wait_for(
        lambda: project.home.exists() and project.catalog().find_by_key("soak"), what="the run"
    ).id
    seen: set[str] = set()
    floors: dict[int, int] = {}  # attempt number after a kill -> newest step committed before
    kinds = []
    while len(kinds) < KILLS:
        attempt = wait_for(lambda: running_attempt(project.catalog(), run_id), what="an attempt")
        time.sleep(rng.uniform(0.05, 0.35))
        committed = store.list(run=run_id, stage="main")
        seen.update(m.id for m in committed)
        floors[attempt["number"] + 1] = max((m.step for m in committed), default=0)
        if rng.random() < 0.6:
            try:
                os.kill(attempt["pid"], signal.SIGKILL)
            except ProcessLookupError:
                continue  # it ended by itself just now: not a kill, pick again
            kinds.append("program")
        else:
            kinds.append("runner")
            os.kill(runner.pid, signal.SIGKILL)
            runner.wait(timeout=30)
            pid = attempt["pid"]
            wait_for(lambda pid=pid: not pid_alive(pid), timeout=10, what="orphan to die")
            runner = project.start("run", "workload.toml", "--key", "soak")
        assert runner.poll() is None, "the run ended before the soak was over; raise STEPS"
    project.done_killing()
    _, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, err
    assert {"program", "runner"} <= set(kinds)
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    listed = {m.id for m in store.list(run=run_id, stage="main")}
    events = project.catalog().events(run_id)
    rotated = {e["details"]["snapshot"] for e in events if e["type"] == "snapshot_kind_deleted"}
    # A runner killed inside a rotation pass leaves the kind marked (its tombstone names the
    # reason) before the pass could record its event; the store finishes it at the next gc.
    rotated |= {
        snapshot
        for snapshot in seen
        if any(
            r["reason"] == "rotation" for r in deletion.records(store.storage, snapshot).values()
        )
    }
    assert seen <= listed | rotated, "a committed snapshot vanished without rotation deleting it"
    assert not [e for e in events if e["type"] == "rotation_failed"]
    assert all(store.check(snapshot) == [] for snapshot in seen & listed)
    attempts = project.get(run_id)["stages"][0]["attempts"]
    for number, floor in floors.items():
        # The first attempt after the kill that laid a copy out (its log_path is recorded with
        # what it restored): a runner killed while the next attempt prepared leaves that one
        # with nothing restored and no program, and the floor carries over to the one after.
        prepared = [a for a in attempts if a["number"] >= number and a["log_path"]]
        restored = prepared[0]["restored_step"] or 0
        assert restored >= floor, (prepared[0]["number"], restored, floor)
