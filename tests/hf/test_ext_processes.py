"""Issue 28, extension 1b: several processes on one machine (``processes``), gloo on the CPU.

A world of two under ``torchrun --nproc_per_node 2`` (and ``accelerate launch --multi_gpu
--num_processes 2``, which on a machine without GPUs launches the same gloo world) runs prepared
on every rank: rank 0 decides each save and every rank saves at that step, the checkpoint holds
every rank's RNG state (``rng_state_<rank>.pth``). Under a real `nodus run`:

- one rank SIGKILLed is an interruption of the whole world, which restarts from the same
  snapshot on every rank; the runner SIGKILLed leaves nothing running, and ``runs resume``
  continues the run; the final weights equal the bare 2-process run's;
- a preemption notice reaches every rank: the world saves at one step, and ``runs resume``
  ends bit-identical to the bare run (with ``save_every = "auto"``: rank 0's cadence).

Refused with the qualify hint while not qualified: tests/hf/test_launchers.py. Unit-level: a
resume under another world size is refused naming both sizes, ``local_rank`` is no identity,
a world's checkpoint lacking a rank's RNG state is not whole.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hf_helpers import PROGRAMS, bare_run_hash
from runner_e2e_helpers import Project, pid_alive

from nodus.runner.processes import procfs
from nodus.schemas import defaults
from nodus.stages import layouts
from nodus.stages.hf.inprocess import identity
from polling import wait_for
from scheduling import ML_IN_PROCESS

PROGRAM = "collators.py"
BIN = Path(sys.executable).parent
TORCHRUN = (str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2")
ACCELERATE = (
    *(str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2"),
    *("--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"),
)
# The launcher asks for bf16 autocast, the program does not (bf16=False in its arguments): the
# Accelerator trains in bf16 all the same, and the integration sees it (docs/hf-trainer.md's
# worked example of a 2-process bf16 program).
ACCELERATE_BF16 = (
    *(str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2"),
    *("--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no"),
)
# A world of two draws 16 examples a step: 6 steps per epoch, 24 in all; saves every 3 steps,
# at epoch ends (6, 12, 18) among them.
ENV = {"COLLATOR": "default", "QUICKSTART_EPOCHS": "4"}
SAVE_EVERY = 3
WRITE_DELAY = "0.5"  # paces the saves, so kills land between them
RNG_FILES = {"rng_state_0.pth", "rng_state_1.pth"}


def _project(tmp_path: Path, launcher: tuple, save_every: int | str = SAVE_EVERY) -> Project:
    return Project(
        tmp_path,
        program=PROGRAM,
        env=ENV,
        launcher=launcher,
        save_every=save_every,
        write_delay=WRITE_DELAY,
    )


def _bare(tmp_path_factory, launcher: tuple) -> str:
    root = tmp_path_factory.mktemp("bare-world")
    return bare_run_hash(root, str(PROGRAMS / PROGRAM), ENV, launcher)


def _rng_files(project: Project, run: str, step: int) -> set[str]:
    """The RNG state files of the snapshot of ``step``."""
    (manifest,) = [m for m in project.snapshots(run) if m.step == step]
    return {Path(f.path).name for f in manifest.files if Path(f.path).name.startswith("rng_")}


def _identity(project: Project, run: str, step: int) -> dict:
    """The identity recorded in the snapshot of ``step``, as a user downloads it."""
    (manifest,) = [m for m in project.snapshots(run) if m.step == step]
    target = project.root / f"identity-{step}"
    proc = project.nodus(
        "snapshots", "download", manifest.id, "--artifact", "resumable", "--to", str(target)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (found,) = target.rglob(defaults.HF_IDENTITY_FILE)
    return json.loads(found.read_text())


def _tree(pid: int) -> list[int]:
    return [pid, *(entry.pid for entry in procfs.descendants(pid, procfs.table()))]


@pytest.mark.hf
@pytest.mark.slow
def test_a_killed_rank_and_a_killed_runner_end_bit_identical_to_the_bare_world(
    tmp_path, tmp_path_factory
):
    bare = _bare(tmp_path_factory, TORCHRUN)
    seed = random.randrange(1 << 30)
    draw = random.Random(seed)
    rank, after, more = draw.randrange(2), draw.choice((3, 6, 9)), draw.choice((1, 2))
    why = (
        f"random seed {seed}: rank {rank} killed after the commit of step {after}, the runner "
        f"after {more} more commit(s)"
    )
    project = _project(tmp_path, TORCHRUN)
    runner = project.start("run", str(project.file), "--key", "k")
    launched = wait_for(lambda: project.running("k", 1), "attempt 1", runner)
    wait_for(lambda: after in project.committed_steps("k", 1), f"step {after} committed", runner)
    victim = procfs.rank_process(launched["pid"], rank)
    assert victim is not None, why
    os.kill(victim, signal.SIGKILL)

    second = wait_for(lambda: project.running("k", 2), "attempt 2", runner)
    restored = project.committed_steps("k", 1)[-1]

    def newer() -> list[int]:
        return [s for s in project.committed_steps("k", 2) if s > restored]

    wait_for(lambda: len(newer()) >= more, f"{more} commit(s) of attempt 2", runner)
    reached = newer()[-1]
    world = _tree(second["pid"])
    assert len(world) >= 3, why  # the launcher and its two ranks
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    wait_for(lambda: not any(pid_alive(p) for p in world), "the world to end with its runner")

    resumed = project.nodus("runs", "resume", "k", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    first, interrupted, last = project.get("k")["stages"][0]["attempts"]
    assert first["outcome"] == "lost", why
    assert f"process {victim}" in first["detail"] and "SIGKILL" in first["detail"], why
    # the whole world restarted from the same snapshot, on every rank
    assert interrupted["restored_step"] == restored >= after, why
    assert interrupted["outcome"] == "lost", why  # its runner died
    assert last["restored_step"] >= reached, why
    assert last["outcome"] == "succeeded", why
    assert _rng_files(project, "k", last["restored_step"]) == RNG_FILES, why
    assert project.outputs_hash("k") == bare, why


@pytest.mark.hf
@pytest.mark.slow
def test_a_notice_saves_a_bf16_world_at_one_step_and_it_resumes_bit_identically(
    tmp_path, tmp_path_factory
):
    # accelerate launch on the CPU sets OMP_NUM_THREADS=1: its bare run is launched the same way
    bare = _bare(tmp_path_factory, ACCELERATE_BF16)
    seed = random.randrange(1 << 30)
    after = random.Random(seed).choice((3, 6, 9))
    why = f"random seed {seed}: SIGTERM to nodus after a commit at or past step {after}"
    # rank 0's auto cadence decides the periodic saves (the first 5 steps after the start)
    project = _project(tmp_path, ACCELERATE_BF16, save_every="auto")
    runner = project.start("run", str(project.file), "--key", "n")

    def reached() -> list[int]:
        return [s for s in project.committed_steps("n", 1) if s >= after]

    seen = wait_for(reached, f"a commit at or past step {after}", runner)[0]
    runner.send_signal(signal.SIGTERM)

    assert runner.wait(timeout=300) == 3, why
    stopped = project.get("n")["stages"][0]["attempts"][0]
    assert stopped["outcome"] == "preempted", why
    saved = project.committed_steps("n", 1)[-1]
    assert saved > seen, why  # the notice's own save, answered by every rank at one step
    # rank 0 wrote it with every rank's RNG state, as the Trainer names them for a world of two
    assert _rng_files(project, "n", saved) == RNG_FILES, why
    # both extensions are in its identity: a world of two, trained in bf16 autocast
    recorded = _identity(project, "n", saved)
    assert (recorded["processes"], recorded["precision"]) == ("2", "bf16 autocast, model float32")

    resumed = project.nodus("runs", "resume", "n", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert project.get("n")["stages"][0]["attempts"][1]["restored_step"] == saved, why
    assert project.outputs_hash("n") == bare, why


@pytest.mark.hf
@pytest.mark.slow
def test_a_paused_world_resumes_under_tight_retention_and_its_branch_ends_bit_identical(
    tmp_path, tmp_path_factory
):
    """Pause and resume, retention and a full-state branch, for a world of two."""
    bare = _bare(tmp_path_factory, TORCHRUN)
    seed = random.randrange(1 << 30)
    after = random.Random(seed).choice((6, 9, 12))
    why = f"random seed {seed}: paused after the commit of step {after}"
    project = Project(
        tmp_path,
        program=PROGRAM,
        env=ENV,
        launcher=TORCHRUN,
        save_every=SAVE_EVERY,
        write_delay=WRITE_DELAY,
        keep_recoverable=1,
    )
    runner = project.start("run", str(project.file), "--key", "w")
    wait_for(lambda: after in project.committed_steps("w", 1), f"step {after} committed", runner)
    paused = project.nodus("runs", "pause", "w", "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=300) == 3, why  # PAUSED: the world saved at one step and stopped
    paused_at = project.committed_steps("w", 1)[-1]
    assert paused_at >= after and _rng_files(project, "w", paused_at) == RNG_FILES, why
    resumed = project.nodus("runs", "resume", "w", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    attempts = project.get("w")["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["paused", "succeeded"], why
    assert attempts[1]["restored_step"] == paused_at, why
    assert project.outputs_hash("w") == bare, why
    # keep_recoverable = 1: the two newest hold the training state (every rank's RNG state);
    # the saves before them keep their weights only. Which two depends on where the pause
    # landed: a loaded machine lets the world train on past step 21 before it stops.
    snapshots = {m.step: m for m in project.snapshots("w")}
    *older, second, newest = sorted(snapshots)
    assert newest == 24 and second >= 21, why
    assert snapshots[newest].kinds == snapshots[second].kinds == ("weights", "state", "files"), why
    assert all(snapshots[step].kinds == ("weights",) for step in older), why
    assert {6, 12} <= set(older), why

    branched = project.nodus("runs", "branch", f"w@{second}", "--from", "full-state", timeout=300)
    assert branched.returncode == 0, branched.stdout[-3000:] + branched.stderr[-3000:]
    runs = json.loads(project.nodus("runs", "list", "--json").stdout)
    child = project.get(runs[0]["id"])
    assert child["phase"] == "SUCCEEDED" and child["parent"]["step"] == second, why
    assert project.committed_steps(child["id"]) == [24], why
    assert project.outputs_hash(child["id"]) == bare, why


# --- unit level: identity and wholeness ------------------------------------------------------


def test_a_resume_under_another_world_size_is_refused_naming_both_sizes():
    same = {key: "same" for key in identity.LABELS} | {"dataset": "xxh3-128:0 (96 rows)"}
    saved, now = same | {"processes": "2"}, same | {"processes": "1"}
    assert identity.differences(saved, now) == [
        "processes training together (world size) differs: checkpoint has '2', this attempt has '1'"
    ]
    assert identity.differences(saved, saved) == []


@ML_IN_PROCESS
@pytest.mark.hf
def test_ranks_of_one_world_have_one_identity_of_their_arguments():
    from transformers import TrainingArguments

    ranks = [
        TrainingArguments(output_dir="out", use_cpu=True, report_to=[], local_rank=rank)
        for rank in (0, 1)
    ]
    values = [identity.argument_values(args) for args in ranks]
    assert values[0] == values[1]
    # a checkpoint whose recorded arguments still hold local_rank is the same training
    old = {"training_arguments": "old digest", "training_argument_values": {**values[0]}}
    old["training_argument_values"]["local_rank"] = 0
    now = {"training_arguments": "new digest", "training_argument_values": values[1]}
    assert identity.same_arguments(old, now)
    now["training_argument_values"] = {**values[1], "seed": 7}
    assert not identity.same_arguments(old, now)


def test_a_world_checkpoint_lacking_a_rank_rng_state_is_not_whole():
    files = ["model.safetensors", "trainer_state.json", "rng_state_0.pth", "nodus-identity.json"]
    lacking = layouts.ranks(files, world=2)
    assert lacking is not None and not lacking.complete
    assert "rng_state_1.pth" in str(lacking.missing) and "world of 2" in str(lacking.missing)
    assert layouts.ranks([*files, "rng_state_1.pth"], world=2) is None
    assert layouts.ranks(["rng_state.pth"], world=1) is None


@pytest.mark.hf
@pytest.mark.slow
def test_nodus_qualify_extension_processes_passes_killing_one_rank_at_a_time(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodus",
            "qualify",
            "--extension",
            "processes",
            "--json",
            "--home",
            str(home),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)["extensions"]["processes"]
    assert result["passed"] and result["reference"] == result["resumed"]
    assert result["resumed_from"] == [5, 12, 27, 27]  # the last one after the mid-save kill
    attempts = result["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost"] * 4 + ["succeeded"]
    for attempt in attempts[:4]:  # a rank was killed, not the launcher, which then exited 1
        assert "extension.py) was killed by SIGKILL" in attempt["detail"], attempt
        assert "then exited with status 1" in attempt["detail"], attempt
    record = json.loads((home / "qualified.json").read_text())
    (environment,) = record["environments"]
    assert environment["extensions"]["processes@cpu"]["passed"], record
