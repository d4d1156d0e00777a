"""The runner's side of the integration protocol, against a small program that speaks it.

The program stands in for a prepared Trainer: it publishes ``state/checkpoint-<step>`` by rename
from ``.nodus/tmp``, writes save records with metrics, answers save requests, and blocks after a
``then: stop`` request until the runner ends it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap

from runner_helpers import committed_steps, pid_alive, running_attempt

from polling import wait_for

PROGRAM = textwrap.dedent("""
    import json, os, sys, time
    control = os.environ["NODUS_CONTROL_DIR"]
    state = os.environ["NODUS_CHECKPOINT_DIR"]
    settings = json.load(open(os.path.join(control, "integration.json")))
    os.makedirs("out", exist_ok=True)
    json.dump(settings, open("out/settings.json", "w"))
    def write(path, data):
        json.dump(data, open(path + ".tmp", "w")); os.replace(path + ".tmp", path)
    write(os.path.join(control, "events", "1.json"),
          {"type": "integration_note", "details": {"restored_step": settings["restored_step"]}})
    step = settings["restored_step"] or 0
    answered = set()
    while step < 100000:
        time.sleep(0.01)
        step += 1
        requests = [json.load(open(os.path.join(control, "requests", n)))
                    for n in sorted(os.listdir(os.path.join(control, "requests")))
                    if n.endswith(".json")]
        fresh = [r for r in requests if r["id"] not in answered]
        if step % settings["save_every"] and not fresh:
            continue
        building = os.path.join(control, "tmp", f"checkpoint-{step}")
        os.makedirs(building)
        write(os.path.join(building, "state.json"), {"step": step})
        os.rename(building, os.path.join(state, f"checkpoint-{step}"))
        answered.update(r["id"] for r in fresh)
        write(os.path.join(control, "saves", f"{step}.json"),
              {"step": step, "epoch": step / 100, "checkpoint": f"checkpoint-{step}",
               "requests": [r["id"] for r in fresh], "metrics": {"loss": 1 / step}})
        if any(r["then"] == "stop" for r in fresh):
            print(f"stopping at {step}", flush=True)
            time.sleep(3600)  # the runner captures, commits and ends us
""")


def test_save_records_requests_and_a_preemption_notice_follow_the_protocol(project):
    (project.root / "train.py").write_text(PROGRAM)
    os.makedirs(project.root / "state")
    project.write(
        command=[sys.executable, "train.py"],
        body='integration = "auto"\n[execution]\nsave_every = 25\n',
    )
    runner = project.start("run", "workload.toml", "--key", "hf")
    run_id = wait_for(
        lambda: project.catalog().find_by_key("hf") if project.home.exists() else None,
        what="the run",
    ).id
    wait_for(lambda: committed_steps(project, run_id), what="a first save")
    first = project.store().list(run=run_id, stage="main")[0]
    assert first.step == 25 and first.metrics["loss"] == 1 / 25 and first.epoch == 0.25
    copy = project.home / "work" / run_id / "main" / "copy"
    wait_for(lambda: (copy / ".nodus" / "committed.json").exists(), what="committed.json")
    assert json.loads((copy / ".nodus" / "committed.json").read_text())["step"] >= 25
    program = running_attempt(project.catalog(), run_id)["pid"]
    # integration.json as documented, key for key: never "qualifying" from a workload file
    settings = json.loads((copy / "out" / "settings.json").read_text())
    assert settings == {
        "integration": "auto",
        "save_every": 25,
        "save_each_epoch": False,
        "restored_step": None,
        "run_id": run_id,
        "stage": "main",
        "attempt": 1,
        "home": str(project.home),
    }
    os.kill(runner.pid, signal.SIGTERM)
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 3, err
    stopped_at = int(out.split("stopping at ")[1].split()[0])
    assert committed_steps(project, run_id)[-1] == stopped_at  # the stop save is committed
    wait_for(lambda: not pid_alive(program), timeout=10, what="the program to be ended")
    run = project.get(run_id)
    notes = [e for e in run["events"] if e["type"] == "integration_note"]
    assert notes[0]["restored_step"] is None
    resumed = project.start("runs", "resume", run_id)
    wait_for(lambda: running_attempt(project.catalog(), run_id), what="the resumed attempt")
    wait_for(
        lambda: [
            e
            for e in project.get(run_id)["events"]
            if e["type"] == "integration_note" and e["attempt"] == 2
        ],
        what="the resumed program's note",
    )
    note = [e for e in project.get(run_id)["events"] if e["type"] == "integration_note"][-1]
    assert note["restored_step"] == stopped_at
    resumed.send_signal(signal.SIGTERM)
    assert resumed.wait(timeout=60) == 3


def test_a_workload_file_cannot_ask_for_qualifying(project):
    # Only `nodus qualify` lifts the qualification check; a workload naming it is refused.
    project.write(body='integration = "hf-trainer-v1"\nqualifying = true\n')
    proc = project.nodus("validate", "workload.toml")
    assert proc.returncode == 2
    assert "unknown key 'qualifying'" in proc.stdout + proc.stderr
