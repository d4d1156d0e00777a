"""A program that writes its checkpoint folders in place, the Trainer's way, under real kills.

The program (``programs/inplace_writer.py``) writes the weights, pauses as a big model's
optimizer gather would, then writes the rest with the completing file last. nodus must never
commit such a folder before it is complete, so a kill in the middle of a save recovers from the
last complete one and the run ends as an uninterrupted one.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from runner_helpers import commits, committed_steps, kill_program

from polling import wait_for

PROGRAM = Path(__file__).parent / "programs" / "inplace_writer.py"
STEPS, SAVE_EVERY = 40, 10


def _program():
    spec = importlib.util.spec_from_file_location("inplace_writer", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


writer = _program()


@pytest.mark.parametrize(
    "layout, marker",
    [
        ("trainer", None),  # a known layout: complete once trainer_state.json is there
        ("custom", "COMPLETE"),  # a layout nodus cannot know: the checkpoint_complete marker
    ],
)
def test_an_in_place_writer_killed_mid_save_recovers_from_its_last_complete_save(
    project, tmp_path, layout, marker
):
    log = tmp_path / "writer.log"
    shutil.copy(PROGRAM, project.root / "train.py")
    command = [sys.executable, "train.py", "--steps", str(STEPS), "--save-every", str(SAVE_EVERY)]
    # Each save pauses after its weights for four settle times (FAST); the save of step 20 stays
    # there until the gate exists, so the kill lands in it however loaded the machine is.
    gate = tmp_path / "gate"
    command += ["--pause", "0.8", "--layout", layout, "--log", str(log)]
    command += ["--hold-at", "20", "--gate", str(gate)]
    body = f'[continuity]\ncheckpoint_complete = "{marker}"\n' if marker else ""
    project.write(command=command, body=body)
    runner = project.start("run", "workload.toml", "--key", "inplace")
    run_id = wait_for(lambda: _run_id(project, "inplace"), what="the run")
    # The second save has its weights on disk and is in its pause; the first is committed.
    wait_for(
        lambda: "weights checkpoint-20" in _read(log) and committed_steps(project, run_id),
        what="a committed snapshot while checkpoint-20 is half written",
    )
    kill_program(project, run_id)
    at_kill = _read(log)
    gate.touch()  # the resumed attempt saves step 20 again without a hold
    _out, err = runner.communicate(timeout=180)
    assert runner.returncode == 0, err

    assert project.result(run_id) == writer.expected(STEPS)
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"]
    restored = attempts[1]["restored_step"]
    # It recovers from a save that was complete when the program died, and finds it whole.
    assert restored is not None and f"saved checkpoint-{restored}" in at_kill
    assert f"resume checkpoint-{restored} missing=-" in _read(log)
    # The half-written folder the kill left behind was seen, and left out of the exit capture.
    half = at_kill.splitlines()[-1].split()[-1] if " weights " in at_kill.splitlines()[-1] else None
    if half is not None:  # the kill landed in the held pause
        events = project.get(run_id)["events"]
        seen = [e for e in events if e["type"] == "checkpoint_incomplete" and e["attempt"] == 1]
        assert any(f"checkpoint-{e['step']}" == half and e["reason"] == "exit" for e in seen)
    # No snapshot ever committed a checkpoint folder without its last-written file.
    last = writer.LAST[layout]
    for manifest in project.store().list(run=run_id):
        folders = {e.path.split("/")[1] for e in manifest.files if e.path.startswith("state/")}
        for folder in folders:
            held = {e.path.rsplit("/", 1)[1] for e in manifest.files if f"/{folder}/" in e.path}
            assert held == {*writer.FILES[layout], *writer.AROUND_WEIGHTS[layout], last}, (
                manifest.step,
                sorted(held),
            )


def _run_id(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


# Saves step 10, saves it again with other contents once the first save was captured (the
# program rewrote that step), then waits to be killed; a restored attempt reports which of the
# two saves it found.
REWRITER = """
import json, os, sys, time
gate = sys.argv[1]
folder = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "checkpoint-10")
if os.path.isdir(folder):
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        handle.write(open(os.path.join(folder, "state.json")).read())
    sys.exit(0)
os.makedirs(folder)
for version in ("first save", "second save, rewritten in place"):
    with open(os.path.join(folder, "state.json"), "w") as handle:
        json.dump({"step": 10, "version": version}, handle)
    print("saved", version, flush=True)
    while not os.path.exists(gate):
        time.sleep(0.02)
time.sleep(600)
"""


def test_a_step_saved_again_is_captured_again_and_the_newer_capture_is_restored(project):
    gate = project.root.parent / "first-captured"  # outside the working copy
    (project.root / "rewrite.py").write_text(REWRITER)
    project.write(command=[sys.executable, "rewrite.py", str(gate)])
    runner = project.start("run", "workload.toml", "--key", "again")
    run_id = wait_for(lambda: _run_id(project, "again"), what="the run")
    wait_for(
        lambda: [c for c in commits(project, run_id) if c["step"] == 10],
        what="step 10 captured once",
    )
    gate.touch()
    captured = wait_for(
        lambda: [c for c in commits(project, run_id) if c["step"] == 10][1:],
        what="step 10 captured twice",
    )
    kill_program(project, run_id)
    _out, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    assert project.result(run_id)["version"] == "second save, rewritten in place"
    newer = captured[0]["snapshot"]
    assert project.get(run_id)["stages"][0]["attempts"][1]["restored_snapshot"] == newer
    listed = project.nodus("runs", "snapshots", run_id, "--json")
    assert [(row["step"], row["id"]) for row in json.loads(listed.stdout)] == [(10, newer)]
