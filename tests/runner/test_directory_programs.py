"""Programs as people write them, under real SIGKILLs: each run ends equal to an uninterrupted one.

The programs in ``programs/`` are written in the shapes people use outside the Trainer: plain
PyTorch overwriting ``ckpt.pt`` in place, Accelerate's ``save_state`` (named by step, by
``checkpoint-<step>``, and automatically) with objects registered for checkpointing, a plain
folder of ``model.pt``/``optimizer.pt`` published by rename, and Lightning's
``ModelCheckpoint``. Each is run once bare (no nodus) for the uninterrupted result, then under
``nodus run`` with kills at random moments, many of them in the middle of a save.

What must hold: the run succeeds with the bare run's result; no restore ever failed (no
attempt failed, no snapshot was suspect: every restore target was whole); every file of every
snapshot left in the store passes its format check.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import commits, pid_alive, running_attempt

import doc_samples
from nodus.stages import formats
from nodus.store.manifest import SnapshotInfo
from polling import wait_for

PROGRAMS = Path(__file__).parent / "programs"
SEED = int(os.environ.get("NODUS_TEST_SEED") or random.randrange(1 << 30))


@pytest.fixture
def rng():
    print(f"kill timings: NODUS_TEST_SEED={SEED}")
    return random.Random(SEED)


# --- running the programs --------------------------------------------------------------------


class Bare:
    """The program run once without nodus, in a folder of its own, in the background."""

    def __init__(self, tmp_path: Path, program: str, args: list[str]) -> None:
        self.folder = tmp_path / f"bare-{program}"
        self.folder.mkdir()
        shutil.copy(PROGRAMS / program, self.folder / "train.py")
        env = dict(os.environ, NODUS_CHECKPOINT_DIR=str(self.folder / "state"))
        env["TMPDIR"] = str(self.folder)  # plain_folder.py renames from there into state/
        self.proc = subprocess.Popen(
            [sys.executable, "train.py", *args],
            cwd=self.folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def result(self) -> dict:
        _out, err = self.proc.communicate(timeout=600)
        assert self.proc.returncode == 0, err[-3000:]
        return json.loads((self.folder / "out" / "result.json").read_text())


def start(project, program: str, args: list[str], log: Path, continuity: str, key: str):
    """`nodus run` of the program in the background, with ``continuity`` as its table's body.

    Its ``--sleep`` per step lasts until :func:`done_killing`: the steps left after the last
    kill run at full speed."""
    shutil.copy(PROGRAMS / program, project.root / "train.py")
    command = [sys.executable, "train.py", *args, "--log", str(log), "--gate", str(_gate(log))]
    body = f"[continuity]\n{continuity}\n[execution]\nmax_recoveries = 60\n"
    project.write(command=command, body=body)
    runner = project.start("run", "workload.toml", "--key", key)
    run_id = wait_for(lambda: _run_id(project, key), what="the run")
    return runner, run_id


def _gate(log: Path) -> Path:
    return log.with_name(f"{log.name}.done-killing")


def done_killing(log: Path) -> None:
    """The program logging to ``log`` stops sleeping between its steps."""
    _gate(log).touch()


def _run_id(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None


def lines(log: Path, pid: int | None = None) -> list[str]:
    """The program's log lines (``<pid> <event> …``), of one process when ``pid`` is given."""
    try:
        text = log.read_text()
    except FileNotFoundError:
        return []
    found = [line.split(" ", 1) for line in text.splitlines() if " " in line]
    return [event for who, event in found if pid is None or who == str(pid)]


def next_program(project, run_id: str, log: Path, after: int) -> dict:
    """The running attempt numbered above ``after``, once its program has started training."""
    catalog = project.catalog()

    def started():
        attempt = running_attempt(catalog, run_id)
        if attempt is None or attempt["number"] <= after:
            return None
        return attempt if lines(log, attempt["pid"]) else None

    return wait_for(started, what=f"an attempt after {after} that started training")


def kill_randomly(project, run_id: str, log: Path, kills: int, rng: random.Random) -> None:
    """SIGKILL the program ``kills`` times, each at a random moment of its training.

    The last kill waits for a snapshot taken while the program trained: on a loaded machine
    every early kill may land before the first commit, and a run that never restores proves
    nothing about restoring."""
    number = 0
    for left in range(kills, 0, -1):
        attempt = next_program(project, run_id, log, number)
        number = attempt["number"]
        if left == 1:
            wait_for(lambda: settled_commits(project, run_id), what="a snapshot while it trains")
        time.sleep(rng.uniform(0.2, 1.5))
        if pid_alive(attempt["pid"]):
            os.kill(attempt["pid"], signal.SIGKILL)


def finish(runner: subprocess.Popen) -> None:
    _out, err = runner.communicate(timeout=600)
    assert runner.returncode == 0, err[-3000:]


def outputs_result(project, run_id: str) -> dict:
    return project.result(run_id)


def killed_at_random(project, tmp_path, rng, program, args, continuity, kills) -> tuple:
    """The program under `nodus run`, SIGKILLed ``kills`` times at random, against its bare
    run: the run ends equal to it, and no restore failed. The run's id and attempts."""
    reference = Bare(tmp_path, program, args)
    log = tmp_path / "program.log"
    runner, run_id = start(project, program, args, log, continuity, program)
    kill_randomly(project, run_id, log, kills, rng)
    done_killing(log)
    finish(runner)
    assert outputs_result(project, run_id) == reference.result()
    return run_id, assert_no_restore_failed(project, run_id), log


def assert_no_restore_failed(project, run_id: str) -> list[dict]:
    """Every attempt was interrupted or succeeded: each restore was a whole checkpoint."""
    run = project.get(run_id)
    attempts = run["stages"][0]["attempts"]
    assert {a["outcome"] for a in attempts[:-1]} <= {"lost"}, attempts
    assert attempts[-1]["outcome"] == "succeeded"
    assert not [e for e in run["events"] if e["type"] == "snapshot_suspect"]
    return attempts


def assert_store_whole(project, run_id: str, tmp_path: Path) -> int:
    """Every file of every snapshot of the run left in the store passes its format check."""
    store = project.store()
    checked = 0
    for manifest in store.list(run=run_id):
        if not manifest.kinds:
            continue
        target = tmp_path / "walk" / manifest.id
        store.restore(manifest.id, str(target), kinds=list(manifest.kinds))
        for path in target.rglob("*"):
            if path.is_file():
                relative = path.relative_to(target).as_posix()
                assert formats.torn(str(path), relative) is None, (manifest.step, relative)
                checked += 1
        shutil.rmtree(target)
    return checked


def settled_commits(project, run_id: str) -> list[int]:
    """Steps committed while a program trained (not at its exit)."""
    return [c["step"] for c in commits(project, run_id) if c["reason"] == "settled"]


# --- plain PyTorch, torch.save in place ------------------------------------------------------

INPLACE = ["--steps", "200", "--save-every", "10", "--sleep", "0.08", "--mb", "100"]


def test_torch_save_in_place_killed_fifteen_times_half_mid_write_ends_as_uninterrupted(
    project, tmp_path, rng
):
    """~100 MiB written in place with ``torch.save(state, "ckpt.pt")``: at least 15 kills, at
    least half of them while the file is being written (seen cut short at the kill)."""
    reference = Bare(tmp_path, "torch_inplace.py", INPLACE)
    log = tmp_path / "inplace.log"
    runner, run_id = start(
        project, "torch_inplace.py", INPLACE, log, 'checkpoint_paths = ["ckpt.pt"]', "inplace"
    )
    copy = project.home / "work" / run_id / "main" / "copy" / "ckpt.pt"
    kills = mid_write = 0
    number = 0
    while kills < 15 or mid_write < 8:
        assert kills < 40, f"only {mid_write} of {kills} kills landed mid-write"
        attempt = next_program(project, run_id, log, number)
        number, pid = attempt["number"], attempt["pid"]
        if kills % 2 == 0:  # in the middle of the next save
            wait_for_save(log, pid)
            time.sleep(rng.uniform(0.0, 0.05))
        else:  # anywhere
            time.sleep(rng.uniform(0.3, 2.0))
        os.kill(pid, signal.SIGKILL)
        kills += 1
        if _cut_short(copy):
            mid_write += 1
    done_killing(log)
    finish(runner)

    assert outputs_result(project, run_id) == reference.result()
    attempts = assert_no_restore_failed(project, run_id)
    assert len(attempts) == kills + 1
    assert settled_commits(project, run_id), "snapshots are taken while it trains"
    events = project.get(run_id)["events"]
    torn = [e for e in events if e["type"] == "checkpoint_incomplete" and e["path"] == "ckpt.pt"]
    assert torn, "a torn ckpt.pt was seen and left out"
    assert assert_store_whole(project, run_id, tmp_path) >= 1


def wait_for_save(log: Path, pid: int) -> None:
    """Until the program ``pid`` begins a save it has not begun yet."""
    begun = saves_begun(log, pid)
    wait_for(lambda: saves_begun(log, pid) > begun, what="a save to begin", timeout=120)


def saves_begun(log: Path, pid: int) -> int:
    return len([e for e in lines(log, pid) if e.startswith("save-begin")])


def _cut_short(path: Path) -> bool:
    """Whether the file a kill just left is shorter than a whole checkpoint of this size."""
    try:
        return formats.torn(str(path)) is not None
    except OSError:
        return False


# --- Accelerate's save_state ------------------------------------------------------------------

ACCELERATE = ["--steps", "60", "--save-every", "5", "--sleep", "0.05"]


@pytest.mark.parametrize(
    "naming, continuity",
    [
        ("checkpoint", 'checkpoint_paths = ["state"]'),  # checkpoint-<step>, registered objects
        ("automatic", 'checkpoint_paths = ["state"]'),  # checkpoints/checkpoint_<i>
        ("step", 'checkpoint_paths = ["state"]\nresume_args = ["--resume-from", "{checkpoint}"]'),
    ],
)
def test_accelerate_save_state_killed_at_random_ends_as_uninterrupted(
    project, tmp_path, rng, naming, continuity
):
    args = [*ACCELERATE, "--naming", naming]
    run_id, attempts, log = killed_at_random(
        project, tmp_path, rng, "accelerate_state.py", args, continuity, 3
    )
    assert settled_commits(project, run_id), "snapshots are taken while it trains"
    assert assert_store_whole(project, run_id, tmp_path) >= 1
    restored = [a["restored_step"] for a in attempts[1:] if a["restored_step"]]
    if naming == "step":  # nodus told the program where to resume: the restored folder
        copy = project.home / "work" / run_id / "main" / "copy"
        told = [e for e in lines(log) if e.startswith(f"resume {copy}/state/step_")]
        assert len(told) == len(restored)


# --- a plain folder published by rename -------------------------------------------------------


def test_a_plain_folder_of_model_and_optimizer_files_is_captured_while_it_trains(
    project, tmp_path, rng
):
    """``checkpoint-N/{model,optimizer,trainer}.pt``: not taken for a Trainer's checkpoint."""
    args = ["--steps", "80", "--save-every", "10", "--sleep", "0.05"]
    run_id, attempts, _log = killed_at_random(
        project, tmp_path, rng, "plain_folder.py", args, 'checkpoint_paths = ["state"]', 3
    )
    assert any(a["restored_step"] for a in attempts[1:])
    events = project.get(run_id)["events"]
    incomplete = [e for e in events if e["type"] == "checkpoint_incomplete"]
    assert not [e for e in incomplete if "trainer_state.json" in e["why"]]
    # only the time rule, at a kill: a folder renamed into place just before it is not taken
    assert all(e["reason"] == "exit" and "signal" in e["why"] for e in incomplete)
    assert settled_commits(project, run_id)
    assert_store_whole(project, run_id, tmp_path)


# --- Lightning's ModelCheckpoint ---------------------------------------------------------------


def test_lightning_model_checkpoint_with_ckpt_path_last_ends_as_uninterrupted(
    project, tmp_path, rng
):
    pytest.importorskip("lightning")
    args = ["--steps", "60", "--save-every", "7", "--sleep", "0.05"]
    continuity = 'checkpoint_paths = ["checkpoints"]'
    run_id, _attempts, _log = killed_at_random(
        project, tmp_path, rng, "lightning_ckpt.py", args, continuity, 2
    )
    steps = settled_commits(project, run_id)
    assert steps and all(step % 7 == 0 for step in steps)  # epoch=E-step=S.ckpt names the step
    assert_store_whole(project, run_id, tmp_path)
    # the name's epoch too; last.ckpt alone (its epoch= file pruned or not yet there) is read
    rows = json.loads(project.nodus("runs", "snapshots", run_id, "--json").stdout)
    assert rows and all(row["epoch"] is not None and row["capture"] is None for row in rows)
    assert {row["step_source"] for row in rows} <= {"name", "checkpoint"}


# --- a torn snapshot, the runner killed --------------------------------------------------------

# No name carries a step: the checkpoint's own iter_num does.
SMALL = ["--steps", "80", "--save-every", "10", "--sleep", "0.05", "--mb", "1"]


def _said(stderr: str) -> list[str]:
    said = stderr.splitlines()
    return [line.removeprefix("nodus: ") for line in said if line.startswith("nodus:")]


def _killed_once(project, tmp_path, args: list[str], key: str, body: str = ""):
    """The program under `nodus run`, SIGKILLed once after two snapshots taken while it
    trained; the run's id, its log and what `nodus run` said."""
    log = tmp_path / f"{key}.log"
    continuity = 'checkpoint_paths = ["ckpt.pt"]' + body
    runner, run_id = start(project, "torch_inplace.py", args, log, continuity, key)
    wait_for(lambda: len(settled_commits(project, run_id)) >= 2, what="two snapshots")
    os.kill(running_attempt(project.catalog(), run_id)["pid"], signal.SIGKILL)
    done_killing(log)
    _out, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, err[-3000:]
    return run_id, log, _said(err)


def test_a_ckpt_pt_snapshot_is_at_the_iter_num_inside_it_and_a_resume_adds_no_step(
    project, tmp_path
):
    """nanoGPT's shape: ``torch.save({..., "iter_num": n}, "ckpt.pt")``, saved again at once on
    resuming. Each snapshot is at the iteration it holds, the terminal names the iteration the
    program resumes from, and the resume's save of what it restored is no new step."""
    args = [*SMALL, "--save-on-resume"]
    reference = Bare(tmp_path, "torch_inplace.py", args)
    run_id, log, said = _killed_once(project, tmp_path, args, "nano")
    assert outputs_result(project, run_id) == reference.result()

    saved = {int(e.rsplit("=", 1)[1]) for e in lines(log) if e.startswith("save-end")}
    manifests = project.store().list(run=run_id)
    assert {m.step for m in manifests} <= saved and max(m.step for m in manifests) == 80
    assert {m.step_source for m in manifests} == {"checkpoint"}
    (resumed,) = [int(e.rsplit("=", 1)[1]) for e in lines(log) if e.startswith("resume step=")]
    second = project.get(run_id)["stages"][0]["attempts"][1]
    assert second["restored_step"] == resumed and second["restored_capture"] is None
    assert f"restoring step {resumed} ({second['restored_snapshot']}) → attempt 2" in said
    rows = json.loads(project.nodus("runs", "snapshots", run_id, "--json").stdout)
    steps = [row["step"] for row in rows]
    assert steps == sorted(set(steps)), "the resume's save of its restored state is no new row"
    assert resumed in steps


def test_a_checkpoint_holding_no_step_nodus_knows_is_numbered_by_capture_and_said_so(
    project, tmp_path
):
    """The step under a key of the program's own: captures are counted, said ``capture N``
    everywhere, and the resume's save of the bytes it restored is no capture of its own."""
    args = [*SMALL, "--save-on-resume", "--step-key", "progress"]
    reference = Bare(tmp_path, "torch_inplace.py", args)
    run_id, _log, said = _killed_once(project, tmp_path, args, "counted")
    assert outputs_result(project, run_id) == reference.result()

    manifests = project.store().list(run=run_id)  # those retention kept
    assert {m.step_source for m in manifests} == {"capture"}
    counted = [(c["step"], c.get("counted")) for c in commits(project, run_id)]
    assert counted == [(n, True) for n in range(1, len(counted) + 1)]  # no count skipped
    assert len({m.files[0].hash for m in manifests}) == len(manifests)  # never the same bytes
    second = project.get(run_id)["stages"][0]["attempts"][1]
    assert second["restored_step"] is None and second["restored_capture"] >= 2
    assert (
        f"restoring capture {second['restored_capture']} ({second['restored_snapshot']}) "
        "→ attempt 2"
    ) in said
    assert not [line for line in said if line.startswith("restoring step")]
    told = project.nodus("runs", "get", run_id).stdout
    assert f"attempt 2 from capture {second['restored_capture']}" in told
    # the resumed program's first save wrote back the restored bytes: not captured again
    store, events = project.store(), project.catalog().events(run_id, types=("snapshot_committed",))
    after = [e["details"]["snapshot"] for e in events if e["attempt"] == 2]
    restored = store.get(second["restored_snapshot"]).files[0].hash
    assert all(store.get(snapshot).files[0].hash != restored for snapshot in after)
    rows = json.loads(project.nodus("runs", "snapshots", run_id, "--json").stdout)
    assert [(row["step"], row["step_source"]) for row in rows] == [(None, "capture")] * len(rows)
    assert [row["capture"] for row in rows] == sorted({row["capture"] for row in rows})
    table = project.nodus("runs", "snapshots", run_id).stdout.splitlines()
    assert all(f"capture {row['capture']}" in line for row, line in zip(rows, table[1:]))


def test_step_key_names_the_key_a_program_keeps_its_step_under(project, tmp_path):
    args = [*SMALL, "--step-key", "progress"]
    run_id, log, _ = _killed_once(project, tmp_path, args, "keyed", '\nstep_key = "progress"')
    saved = {int(e.rsplit("=", 1)[1]) for e in lines(log) if e.startswith("save-end")}
    manifests = project.store().list(run=run_id)
    assert {m.step for m in manifests} <= saved and max(m.step for m in manifests) == 80


def _torn_snapshot(project, run_id: str, after: int, step: int) -> str:
    """Commit a snapshot whose ckpt.pt is cut short: its blob verifies, its bytes are torn."""
    store = project.store()
    newest = max(store.list(run=run_id), key=lambda m: m.step)
    good = project.root.parent / f"good-{step}"
    store.restore(newest.id, str(good))
    data = (good / "ckpt.pt").read_bytes()
    torn = project.root.parent / f"torn-{step}"
    torn.mkdir()
    (torn / "ckpt.pt").write_bytes(data[: len(data) // 2])
    info = SnapshotInfo(run=run_id, stage="main", attempt=after, step=step, role="checkpoint")
    return store.capture(str(torn), ["ckpt.pt"], info=info).id


def _runner_killed_after_a_commit(project, tmp_path, key: str, commits_: int):
    log = tmp_path / f"{key}.log"
    runner, run_id = start(
        project, "torch_inplace.py", SMALL, log, 'checkpoint_paths = ["ckpt.pt"]', key
    )
    wait_for(
        lambda: len(settled_commits(project, run_id)) >= commits_,
        what=f"{commits_} snapshots taken while it trains",
    )
    os.kill(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=60)
    wait_for(lambda: running_attempt(project.catalog(), run_id) is None, what="the program gone")
    done_killing(log)  # the `nodus run` that recovers it trains the steps left at full speed
    return run_id, log


def test_a_killed_runner_resumes_from_a_snapshot_taken_while_the_program_trained(project, tmp_path):
    reference = Bare(tmp_path, "torch_inplace.py", SMALL)
    run_id, log = _runner_killed_after_a_commit(project, tmp_path, "runner-killed", 2)
    taken = max(settled_commits(project, run_id))
    proc = project.nodus("run", "workload.toml", "--key", "runner-killed", timeout=300)
    assert proc.returncode == 0, proc.stderr

    assert outputs_result(project, run_id) == reference.result()
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert attempts[1]["restored_step"] >= taken >= 2
    assert any(e.startswith("resume step=") for e in lines(log))  # not "start fresh"


def test_a_torn_snapshot_is_stepped_past_and_the_run_succeeds(project, tmp_path):
    reference = Bare(tmp_path, "torch_inplace.py", SMALL)
    run_id, _log = _runner_killed_after_a_commit(project, tmp_path, "torn", 2)
    attempt = project.get(run_id)["stages"][0]["attempts"][-1]["number"]
    newest = max(m.step for m in project.store().list(run=run_id))
    torn = _torn_snapshot(project, run_id, attempt, newest + 1)
    proc = project.nodus("run", "workload.toml", "--key", "torn", timeout=300)
    assert proc.returncode == 0, proc.stderr

    assert outputs_result(project, run_id) == reference.result()
    run = project.get(run_id)
    (suspect,) = [e for e in run["events"] if e["type"] == "snapshot_suspect"]
    assert suspect["snapshot"] == torn and suspect["step"] == newest + 1
    assert "central directory" in suspect["error"] or "zip" in suspect["error"]
    outcomes = [a["outcome"] for a in run["stages"][0]["attempts"]]
    assert outcomes[-2:] == ["failed", "succeeded"]
    listed = json.loads(project.nodus("runs", "snapshots", run_id, "--json").stdout)
    marked = {row["id"]: row["suspect"] for row in listed}
    if torn in marked:  # retention may have removed it since
        assert marked[torn] and marked[torn]["error"] == suspect["error"]
        doc_samples.check("suspect-listing", project.nodus("runs", "snapshots", run_id).stdout)


def test_stepping_back_is_bounded_and_the_run_names_the_snapshots_it_tried(project, tmp_path):
    run_id, _log = _runner_killed_after_a_commit(project, tmp_path, "bound", 1)
    attempt = project.get(run_id)["stages"][0]["attempts"][-1]["number"]
    newest = max(m.step for m in project.store().list(run=run_id))
    torn = [_torn_snapshot(project, run_id, attempt, newest + i) for i in (1, 2, 3)]
    proc = project.nodus("run", "workload.toml", "--key", "bound", timeout=300)
    assert proc.returncode == 1

    run = project.get(run_id)
    assert run["phase"] == "FAILED"
    suspects = [e["snapshot"] for e in run["events"] if e["type"] == "snapshot_suspect"]
    assert suspects == list(reversed(torn))  # newest first, three in a row, then no further
    for snapshot in torn:
        assert snapshot in run["message"]
    assert "at most 2 are stepped past" in run["message"]
    # the workload names python by its path; the sample, as a user's would, by its name
    doc_samples.check("stepped-past", proc.stderr.replace(sys.executable, "python"))


# --- killed right after a save: a checkpoint proven whole loses no interval -------------------

# A settle window long enough that a kill right after a save always lands inside it: what the
# time rule alone would refuse, the checkpoint's proof of wholeness takes (stages.completeness).
WINDOW = {"NODUS_SETTLE_S": "2"}


def killed_right_after_a_save(
    project, tmp_path, program, args, continuity, *, after=None, of: str = ""
):
    """The program under `nodus run`, SIGKILLed as soon as it logs the end of a save (of a
    file whose log line holds ``of``; after ``after(run_id)`` holds, when given): the step of
    that save, the run's id and the log."""
    reference = Bare(tmp_path, program, args)
    log = tmp_path / "program.log"
    shutil.copy(PROGRAMS / program, project.root / "train.py")
    command = [sys.executable, "train.py", *args, "--log", str(log), "--gate", str(_gate(log))]
    project.write(command=command, body=f"[continuity]\n{continuity}\n")
    runner = project.start("run", "workload.toml", "--key", program, env=WINDOW)
    run_id = wait_for(lambda: _run_id(project, program), what="the run")
    pid = next_program(project, run_id, log, 0)["pid"]
    if after is not None:
        wait_for(lambda: after(run_id), what="the program's earlier saves taken")
    ended = len(saves_ended(log, pid, of))
    wait_for(lambda: len(saves_ended(log, pid, of)) > ended, what="a save to end", timeout=120)
    os.kill(pid, signal.SIGKILL)
    step = int(saves_ended(log, pid, of)[-1].rsplit("step=", 1)[1])
    done_killing(log)
    finish(runner)
    assert outputs_result(project, run_id) == reference.result()
    return step, run_id, log


def saves_ended(log: Path, pid: int, of: str = "") -> list[str]:
    return [e for e in lines(log, pid) if e.startswith("save-end") and of in e]


def resumed(project, run_id: str, log: Path) -> str:
    """The second attempt's first line: where the program carried on from."""
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"], attempts
    return lines(log, attempts[1]["pid"])[0]


@pytest.mark.slow
def test_nanogpt_ckpt_pt_killed_right_after_a_save_resumes_from_that_save(project, tmp_path):
    args = ["--steps", "30", "--save-every", "10", "--sleep", "0.3", "--mb", "5"]
    step, run_id, log = killed_right_after_a_save(
        project, tmp_path, "torch_inplace.py", args, 'checkpoint_paths = ["ckpt.pt"]'
    )
    assert resumed(project, run_id, log) == f"resume step={step}"
    assert not [e for e in project.get(run_id)["events"] if e["type"] == "checkpoint_incomplete"]


@pytest.mark.slow
def test_lightning_last_ckpt_killed_right_after_a_save_resumes_from_that_save(project, tmp_path):
    pytest.importorskip("lightning")
    args = ["--steps", "21", "--save-every", "7", "--sleep", "0.3"]
    step, run_id, log = killed_right_after_a_save(
        project,
        tmp_path,
        "lightning_ckpt.py",
        args,
        'checkpoint_paths = ["checkpoints"]',
        of="last.ckpt",
    )
    # A Lightning save writes epoch=E-step=S.ckpt, then last.ckpt, the one `ckpt_path="last"`
    # resumes from: the kill comes right after the second, and both are proven whole. (Killed
    # between the two, the program itself would resume from the previous last.ckpt.)
    assert resumed(project, run_id, log) == f"resume last.ckpt step={step}"
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert attempts[1]["restored_step"] == step


@pytest.mark.slow
def test_accelerate_step_folders_killed_right_after_a_save_resume_from_that_save(project, tmp_path):
    """checkpointing.py's ``save_state("step_N")`` with two registered objects: once a folder
    of the run was taken (it tells how many objects Accelerate writes after its RNG states),
    a folder written right before the kill is proven whole by its last files."""
    args = ["--steps", "30", "--save-every", "5", "--sleep", "0.6", "--naming", "step"]
    continuity = 'checkpoint_paths = ["state"]\nresume_args = ["--resume-from", "{checkpoint}"]'
    step, run_id, log = killed_right_after_a_save(
        project,
        tmp_path,
        "accelerate_state.py",
        args,
        continuity,
        after=lambda run_id: settled_commits(project, run_id),
    )
    copy = project.home / "work" / run_id / "main" / "copy"
    assert resumed(project, run_id, log) == f"resume {copy}/state/step_{step} step={step}"


@pytest.mark.slow
def test_run_clm_no_trainer_step_folders_killed_right_after_a_save_resume_from_that_save(
    project, tmp_path
):
    """Transformers' run_clm_no_trainer.py shape: ``accelerator.save_state("step_N")`` of a
    GPT-2, resumed with ``--resume_from_checkpoint``. Its model download is that step's
    weights alone (the folder holds no config: the example writes one only at the end)."""
    args = ["--max_train_steps", "20", "--checkpointing_steps", "5", "--sleep", "0.6"]
    args += ["--output_dir", "lm", "--exact"]
    continuity = (
        'checkpoint_paths = ["lm"]\nresume_args = ["--resume_from_checkpoint", "{checkpoint}"]'
    )
    step, run_id, log = killed_right_after_a_save(
        project,
        tmp_path,
        "accelerate_example.py",
        args,
        continuity,
        after=lambda run_id: settled_commits(project, run_id),
    )
    copy = project.home / "work" / run_id / "main" / "copy"
    assert resumed(project, run_id, log) == f"resume {copy}/lm/step_{step} step={step}"
    target = tmp_path / "weights"
    proc = project.nodus(
        "snapshots", "download", f"{run_id}@{step}", "--artifact", "model", "--to", str(target)
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(target)) == ["model.safetensors"]


# --- downloads of a selection captured whole ---------------------------------------------------


@pytest.mark.slow
def test_model_download_of_step_folders_is_that_steps_model_and_loads(project, tmp_path):
    """A loop saving ``save_pretrained("lm/step_N")``: each snapshot holds every step folder
    so far; ``RUN@STEP --artifact model`` is the folder of that step, config included."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    args = ["--max_train_steps", "15", "--checkpointing_steps", "5", "--sleep", "0.3"]
    args += ["--output_dir", "lm", "--save", "pretrained"]
    shutil.copy(PROGRAMS / "accelerate_example.py", project.root / "train.py")
    project.write(
        command=[sys.executable, "train.py", *args],
        body='[continuity]\ncheckpoint_paths = ["lm"]\n',
    )
    proc = project.nodus("run", "workload.toml", "--key", "pretrained", timeout=300)
    assert proc.returncode == 0, proc.stderr
    run_id = _run_id(project, "pretrained")
    store = project.store()
    for step in (10, 15):
        (manifest, *_) = sorted(
            (m for m in store.list(run=run_id) if m.step == step), key=lambda m: -m.attempt
        )
        held = {entry.path for entry in manifest.held_files()}
        assert f"lm/step_{step}/model.safetensors" in held and "lm/step_5/model.safetensors" in held
        target = tmp_path / f"model-{step}"
        proc = project.nodus(
            "snapshots", "download", f"{run_id}@{step}", "--artifact", "model", "--to", str(target)
        )
        assert proc.returncode == 0, proc.stderr
        assert sorted(os.listdir(target)) == [
            "config.json",
            "generation_config.json",
            "model.safetensors",
        ]
        whole = tmp_path / f"snapshot-{step}"
        store.restore(manifest.id, str(whole))
        own = load_file(str(whole / "lm" / f"step_{step}" / "model.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(target)
        loaded = model.state_dict()
        assert all(torch_equal(loaded[name], tensor) for name, tensor in own.items())


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))
