"""Recovery from the store alone: two `$NODUS_HOME` folders stand for two machines sharing a store.

A run started on home A has its runner SIGKILLed after a committed snapshot (the machine is
lost); home B, empty, knows only the store URL. The store's run record and lease are what B
recovers the run from and what keeps two machines from driving it at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import Project

from nodus.schemas import defaults
from nodus.store import keys, open_store
from nodus.testing.counter import expected_value
from polling import wait_for

# Outside the quick tier: real runs on two machines' homes, killed and adopted.
pytestmark = pytest.mark.slow

STEPS, SAVE_EVERY, SLEEP = 300, 10, 0.01


@pytest.fixture
def machines(tmp_path) -> tuple[Project, Project]:
    """Homes A and B over one code folder; each `nodus` call names the store with --store."""
    root = tmp_path / "project"
    root.mkdir()
    a = Project(root, tmp_path / "home-a")
    a.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    return a, Project(root, tmp_path / "home-b")


def lost_run(a: Project, url: str, *args: str) -> str:
    """Start a run on A and SIGKILL its runner once the store holds a committed snapshot."""
    runner = a.start("--store", url, "run", "workload.toml", *args)
    run_id = wait_for(lambda: a.catalog().list_runs(), what="the run")[0].id
    store = open_store(url)
    wait_for(lambda: store.list(run=run_id, stage="main"), what="a committed snapshot")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    return run_id


def result(url: str, run_id: str, target) -> dict:
    """The counter's result, read back from the run's committed outputs in the store."""
    store = open_store(url)
    manifests = store.list(run=run_id, stage="main", role="outputs")
    assert manifests, f"{run_id} committed no outputs"
    store.restore(manifests[-1].id, str(target))
    return json.loads((target / "out" / "result.json").read_text())


def attempts(project: Project, run_id: str) -> list[tuple[int, str | None]]:
    return [(a["number"], a["outcome"]) for a in project.get(run_id)["stages"][0]["attempts"]]


def write_lease(url: str, run_id: str, *, holder: str, expires: float) -> None:
    lease = {"holder": holder, "token": "f" * 16, "host": "far-away", "pid": 4242}
    open_store(url).storage.write(
        keys.lease_key(run_id), json.dumps({**lease, "expires": expires}).encode()
    )


def test_a_run_lost_with_its_home_is_resumed_from_an_s3_store_alone(machines, s3_bucket, tmp_path):
    a, b = machines
    url = f"s3://{s3_bucket}/store"
    run_id = lost_run(a, url)
    a.done_killing()  # B's attempt runs the steps left at full speed
    resumed = b.nodus("--store", url, "runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{run_id} found in the store {url}" in resumed.stderr
    assert result(url, run_id, tmp_path / "out") == {"steps": STEPS, "value": expected_value(STEPS)}
    # Attempt numbers go on: B's attempt is 2, after A's attempt 1, whose runner died.
    assert attempts(b, run_id) == [(1, "lost"), (2, "succeeded")]
    restored = b.get(run_id)["stages"][0]["attempts"][1]["restored_step"]
    assert restored is not None and restored > 0  # continued from a snapshot, not from scratch
    record = json.loads(open_store(url).storage.read(keys.run_record_key(run_id)))
    assert record["version"] == 1 and record["phase"] == "SUCCEEDED"
    assert not open_store(url).storage.exists(keys.lease_key(run_id))  # given back at the end


def test_run_with_the_key_finds_the_keys_run_in_the_store_and_continues_it(machines, tmp_path):
    a, b = machines
    url = "file://" + str(tmp_path / "shared-store")
    run_id = lost_run(a, url, "--key", "nightly")
    a.done_killing()  # B's attempt runs the steps left at full speed
    again = b.nodus("--store", url, "run", "workload.toml", "--key", "nightly")
    assert again.returncode == 0, again.stderr
    assert f"{run_id} found in the store" in again.stderr
    assert result(url, run_id, tmp_path / "out") == {"steps": STEPS, "value": expected_value(STEPS)}
    assert attempts(b, run_id) == [(1, "lost"), (2, "succeeded")]
    # A third machine finds it finished in the record: reported, not run again.
    c = Project(a.root, tmp_path / "home-c")
    third = c.nodus("--store", url, "run", "workload.toml", "--key", "nightly")
    assert third.returncode == 0, third.stderr
    assert "has already finished: SUCCEEDED" in third.stderr
    assert len(c.get("nightly")["stages"][0]["attempts"]) == 2
    # A deleted run is forgotten by the store too: no machine can adopt it any more.
    assert c.nodus("--store", url, "runs", "delete", "nightly").returncode == 0
    storage = open_store(url).storage
    assert not storage.exists(keys.run_record_key(run_id))
    assert not storage.exists(keys.run_key_index_key("nightly"))


def test_two_machines_racing_to_resume_one_run_leave_exactly_one_driving(machines, tmp_path):
    a, b = machines
    url = "file://" + str(tmp_path / "shared-store")
    run_id = lost_run(a, url)
    # The lease's settle time as shipped: the window a racer's read-then-write must fit in.
    settle = {"NODUS_LEASE_SETTLE_S": str(defaults.RUN_LEASE_SETTLE_S)}
    racers = [p.start("--store", url, "runs", "resume", run_id, env=settle) for p in (a, b)]
    ended = [(p.wait(timeout=120), p.communicate()[1]) for p in racers]
    assert sorted(code for code, _ in ended) == [0, 5], ended
    refused = next(err for code, err in ended if code == 5)
    assert f"{run_id} is already running elsewhere (" in refused and "pid " in refused
    assert result(url, run_id, tmp_path / "out") == {"steps": STEPS, "value": expected_value(STEPS)}
    winner = a if ended[0][0] == 0 else b
    assert attempts(winner, run_id) == [(1, "lost"), (2, "succeeded")]
    record = json.loads(open_store(url).storage.read(keys.run_record_key(run_id)))
    assert [x["number"] for x in record["stages"][0]["attempts"]] == [1, 2]
    outputs = open_store(url).list(run=run_id, stage="main", role="outputs")
    assert [m.attempt for m in outputs] == [2]


def test_a_live_lease_elsewhere_refuses_and_an_expired_one_is_taken_over(machines, tmp_path):
    a, b = machines
    url = "file://" + str(tmp_path / "shared-store")
    run_id = lost_run(a, url)
    write_lease(url, run_id, holder="ops@far-away pid 4242", expires=time.time() + 600)
    refused = b.nodus("--store", url, "runs", "resume", run_id)
    assert refused.returncode == 5, refused.stderr
    assert "already running elsewhere (ops@far-away pid 4242" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not list(open_store(url).list(run=run_id, stage="main", role="outputs"))
    write_lease(url, run_id, holder="ops@far-away pid 4242", expires=time.time() - 1)
    a.done_killing()  # B's attempt runs the steps left at full speed
    resumed = b.nodus("--store", url, "runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert result(url, run_id, tmp_path / "out") == {"steps": STEPS, "value": expected_value(STEPS)}
    assert attempts(b, run_id) == [(1, "lost"), (2, "succeeded")]


def test_a_runner_whose_run_was_taken_over_elsewhere_commits_nothing_more(machines, tmp_path):
    a, _ = machines
    a.write(steps=100000, save_every=SAVE_EVERY, sleep=SLEEP)
    url = "file://" + str(tmp_path / "shared-store")
    runner = a.start("--store", url, "run", "workload.toml")
    run_id = wait_for(lambda: a.catalog().list_runs(), what="the run")[0].id
    store = open_store(url)
    wait_for(lambda: store.list(run=run_id, stage="main"), what="a committed snapshot")
    # Another machine takes the run over, as its runner would: its lease, then its attempt 2.
    write_lease(url, run_id, holder="ops@far-away pid 4242", expires=time.time() + 600)
    record = json.loads(store.storage.read(keys.run_record_key(run_id)))
    record["stages"][0]["attempts"].append({**record["stages"][0]["attempts"][0], "number": 2})
    record["driver"] = "f" * 16
    store.storage.write(keys.run_record_key(run_id), json.dumps(record).encode())
    assert runner.wait(timeout=120) == 1, runner.communicate()
    ended = a.get(run_id)["stages"][0]["attempts"][0]
    assert ended["outcome"] == "failed" and "superseded in the store" in ended["detail"]
    # The stale runner neither overwrote the new driver's record nor dropped its lease.
    kept = json.loads(store.storage.read(keys.run_record_key(run_id)))
    assert kept["driver"] == "f" * 16 and kept["phase"] == record["phase"]
    assert "ops@far-away" in store.storage.read(keys.lease_key(run_id)).decode()
    assert "lease_lost" in [e["type"] for e in a.get(run_id)["events"]]


def test_a_run_another_machine_finished_brings_its_model_versions_along(machines, tmp_path):
    a, b = machines
    # A program that saves weights (the Trainer's file names), so the run has a model.
    program = Path(__file__).parent / "programs" / "inplace_writer.py"
    shutil.copy(program, a.root / "train.py")
    command = [sys.executable, "train.py", "--steps", "60", "--save-every", "10"]
    a.write(command=[*command, "--pause", "0", "--log", str(tmp_path / "writer.log")])
    url = "file://" + str(tmp_path / "shared-store")
    run_id = lost_run(a, url)
    finished = b.nodus("--store", url, "runs", "resume", run_id)
    assert finished.returncode == 0, finished.stderr
    assert b.nodus("models", "alias", "counter", "1", "prod").returncode == 0

    # A still has the run as its dead runner left it; driving it finds B's record ahead.
    again = a.nodus("--store", url, "runs", "resume", run_id)
    assert again.returncode == 0, again.stderr
    assert a.get(run_id)["phase"] == "SUCCEEDED"
    assert a.get(run_id)["model"]["ref"] == "counter:1"
    prod = json.loads(a.nodus("models", "get", "counter@prod", "--json").stdout)
    assert (prod["ref"], prod["run"], prod["run_model"]) == ("counter:1", run_id, True)
    listed = json.loads(a.nodus("models", "list", "--json").stdout)
    assert [v["ref"] for v in listed] == ["counter:1"]  # B's version, not a second one


def test_a_run_interrupted_by_a_reboot_is_continued_by_key_on_another_machine(machines, tmp_path):
    """The record says INTERRUPTED (SIGTERM to A's runner, as a shutdown sends): B adopts it
    and continues it, as A's own next `run --key` would (one decision for both)."""
    a, b = machines
    url = "file://" + str(tmp_path / "shared-store")
    runner = a.start("--store", url, "run", "workload.toml", "--key", "nightly")
    run_id = wait_for(lambda: a.catalog().list_runs(), what="the run")[0].id
    store = open_store(url)
    wait_for(lambda: store.list(run=run_id, stage="main"), what="a committed snapshot")
    os.kill(runner.pid, signal.SIGTERM)
    assert runner.wait(timeout=120) == 3
    record = json.loads(store.storage.read(keys.run_record_key(run_id)))
    assert record["phase"] == "INTERRUPTED"
    a.done_killing()
    again = b.nodus("--store", url, "run", "workload.toml", "--key", "nightly")
    assert again.returncode == 0, again.stderr
    assert f"{run_id} found in the store" in again.stderr
    assert "was INTERRUPTED from outside" in again.stderr
    assert attempts(b, run_id) == [(1, "preempted"), (2, "succeeded")]
    assert result(url, run_id, tmp_path / "out") == {"steps": STEPS, "value": expected_value(STEPS)}


def test_outputs_of_an_attempt_superseded_elsewhere_are_not_a_store_failure(machines, tmp_path):
    """A superseded attempt that then succeeds commits no outputs, and says it was superseded:
    the fence is no store failure (``outputs_failed``), whatever the program did."""
    a, _ = machines
    a.write(steps=STEPS, save_every=100000, sleep=SLEEP, gated=True)  # no save: outputs only
    url = "file://" + str(tmp_path / "shared-store")
    runner = a.start("--store", url, "run", "workload.toml")
    run_id = wait_for(lambda: a.catalog().list_runs(), what="the run")[0].id
    store = open_store(url)

    def recorded_attempt() -> dict | None:
        if not store.storage.exists(keys.run_record_key(run_id)):
            return None
        record = json.loads(store.storage.read(keys.run_record_key(run_id)))
        return record if record["stages"][0]["attempts"] else None

    record = wait_for(recorded_attempt, what="attempt 1 in the run's record")
    write_lease(url, run_id, holder="ops@far-away pid 4242", expires=time.time() + 600)
    record["stages"][0]["attempts"].append({**record["stages"][0]["attempts"][0], "number": 2})
    record["driver"] = "f" * 16
    store.storage.write(keys.run_record_key(run_id), json.dumps(record).encode())
    a.done_killing()  # the program finishes now: its outputs meet the fence
    assert runner.wait(timeout=120) == 1, runner.communicate()
    run = a.get(run_id)
    ended = run["stages"][0]["attempts"][0]
    assert ended["outcome"] == "failed", ended
    assert "superseded in the store" in ended["detail"] or "lost the run's lease" in ended["detail"]
    assert "outputs_failed" not in [e["type"] for e in run["events"]]
    assert not list(store.list(run=run_id, stage="main", role="outputs"))
