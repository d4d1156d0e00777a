"""Issue 28 point 1a: the mixed-precision extension, under real `nodus run` processes.

``programs/mixed_precision.py`` trains the quick-start with ``TrainingArguments(bf16=True)`` on
the CPU (bfloat16 autocast) or with its model stored in bfloat16. Each run is killed at random
and interrupted on purpose (a notice, a pause), and ends with the weights of its bare run (no
nodus): bit for bit. A checkpoint records the precision it trained in, and a resume under
another precision is refused naming both. Before the extension is qualified on this machine
(only its own records counting) the program is refused naming the command that qualifies it;
``nodus qualify --extension mixed-precision`` then admits it. fp16 on the CPU, which the library
trains in float32, is refused "not supported yet" (tests/hf/test_profile.py).
"""

from __future__ import annotations

import json
import os
import random
import signal

import pytest
import tomli_w
from hf_helpers import PROGRAMS, bare_run_hash
from runner_e2e_helpers import Project

from nodus.schemas.defaults import ENV_IGNORE_SHIPPED_QUALIFICATIONS as IGNORE_SHIPPED
from nodus.stages.hf import qualification
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROGRAM = "mixed_precision.py"
# 3 epochs of 12 steps; saves every 5 and at the epoch ends 12, 24 and 36
ENV = {"QUICKSTART_EPOCHS": "3"}
SAVE_EVERY = 5
SAVES = (5, 10, 12, 15, 20, 24, 25, 30, 35, 36)
AUTOCAST = "bf16 autocast, model float32"


def _bare(tmp_path_factory, precision: str, program: str = PROGRAM) -> str:
    root = tmp_path_factory.mktemp(f"bare-{precision}")
    return bare_run_hash(root, str(PROGRAMS / program), {**ENV, "PRECISION": precision})


# The tests of the module's killed run share one xdist worker: it is run once.
on_autocast_run = pytest.mark.xdist_group("autocast_run")


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> dict[str, str]:
    """Final weights of the uninterrupted bare runs, by precision."""
    return {p: _bare(tmp_path_factory, p) for p in ("float32", "bf16", "bf16-model")}


@pytest.fixture(scope="module")
def autocast_run(tmp_path_factory, bare) -> tuple[Project, str]:
    """bf16 autocast killed twice at random, stopped by a notice, resumed: the run and why."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    first = rng.choice([5, 10, 12])  # inside epoch 0 and at its end
    second = rng.choice([15, 20, 24])  # inside epoch 1 and at its end
    notice = rng.choice([25, 30])  # inside epoch 2
    why = f"random seed {seed}: killed after {first} and {second}, SIGTERM after {notice}"
    project = Project(
        tmp_path_factory.mktemp("bf16"),
        program=PROGRAM,
        env={**ENV, "PRECISION": "bf16"},
        save_every=SAVE_EVERY,
        write_delay="0.5",
        keep_recoverable=1,  # the newest save is held whole: every recovery restores it
    )
    runner = project.start("run", str(project.file), "--key", "a")
    project.kill_after_save("a", 1, first, runner)
    project.kill_after_save("a", 2, second, runner)
    wait_for(lambda: notice in project.committed_steps("a", 3), f"step {notice} committed", runner)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=300) == 3, why
    resumed = project.nodus("runs", "resume", "a", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return project, why, (first, second)


@on_autocast_run
def test_bf16_autocast_killed_twice_and_noticed_ends_bit_identical(autocast_run, bare):
    project, why, kills = autocast_run
    # bf16 autocast really trains in bf16: not the float32 run's weights
    assert bare["bf16"] != bare["float32"]
    attempts = project.get("a")["stages"][0]["attempts"]
    outcomes = [a["outcome"] for a in attempts]
    assert outcomes == ["lost", "lost", "preempted", "succeeded"], why
    noticed = project.committed_steps("a", 3)[-1]
    assert [a["restored_step"] for a in attempts[1:]] == [*kills, noticed], why
    # saves on the cadence and at epoch ends, each attempt from where it was restored
    spans = zip([0, *kills, noticed], [*kills, noticed, 36])
    for number, (start, end) in enumerate(spans, start=1):
        # the notice's own save (attempt 3) lands at whatever step the notice reached
        expected = sorted(
            {s for s in SAVES if start < s <= end} | ({end} if number == 3 else set())
        )
        assert project.committed_steps("a", number) == expected, (why, number)
    assert project.outputs_hash("a") == bare["bf16"], why


@on_autocast_run
def test_a_checkpoint_records_its_precision(autocast_run, tmp_path):
    project, _why, _ = autocast_run
    target = tmp_path / "resumable"
    proc = project.nodus(
        "snapshots", "download", "a@36", "--artifact", "resumable", "--to", str(target)
    )
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads((target / "nodus-identity.json").read_text())
    assert recorded["precision"] == AUTOCAST


@on_autocast_run
def test_a_resume_in_float32_of_a_bf16_checkpoint_is_refused_naming_both(autocast_run):
    project, _why, _ = autocast_run
    # retention (keep_recoverable = 1) left the training state of the two newest saves
    file = _child(project, "float32", resume_from="a@35", env={"PRECISION": "float32"})
    proc = project.nodus("run", file, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (event,) = [e for e in _newest(project)["events"] if e["type"] == "integration_refused"]
    assert (
        f"precision (mixed precision, model dtype) differs: checkpoint has {AUTOCAST!r}, "
        "this attempt has 'float32'"
    ) in event["reasons"], event


@on_autocast_run
def test_a_full_state_branch_of_a_bf16_run_ends_bit_identical(autocast_run, bare):
    project, _why, _ = autocast_run
    proc = project.nodus("runs", "branch", "a@35", "--from", "full-state", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    child = _newest(project)
    assert child["phase"] == "SUCCEEDED" and child["parent"]["step"] == 35
    assert project.committed_steps(child["id"]) == [36]
    assert project.outputs_hash(child["id"]) == bare["bf16"]


def test_a_bf16_model_paused_and_killed_on_auto_cadence_ends_bit_identical(tmp_path, bare):
    seed = random.randrange(1 << 30)
    kill_at = random.Random(seed).choice([1, 2])  # after the resumed attempt's 1st or 2nd save
    why = f"random seed {seed}: paused at its first boundary, killed after save {kill_at} of 2+"
    project = Project(
        tmp_path,
        program=PROGRAM,
        env={**ENV, "PRECISION": "bf16-model"},
        save_every="auto",
        write_delay="0.3",
    )
    runner = project.start("run", str(project.file), "--key", "m")
    # Paused as soon as its program runs, so the pause's save comes at its first boundaries and
    # the resumed attempt has most of the run left to save in. (Paused only once a first save
    # was committed, the program could reach step 35 of 36 first on a loaded machine, leaving
    # the resumed attempt one save.)
    wait_for(lambda: project.running("m", 1), "attempt 1's program", runner)
    paused = project.nodus("runs", "pause", "m", "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=300) == 3, why  # PAUSED
    at_pause = project.committed_steps("m", 1)[-1]

    runner = project.start("runs", "resume", "m")
    attempt = wait_for(lambda: project.running("m", 2), "attempt 2", runner)
    wait_for(lambda: len(project.committed_steps("m", 2)) >= kill_at, "saves", runner)
    os.kill(attempt["pid"], signal.SIGKILL)
    assert runner.wait(timeout=300) == 0, why

    view = project.get("m")
    attempts = view["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["paused", "lost", "succeeded"], why
    assert attempts[1]["restored_step"] == at_pause, why
    assert attempts[2]["restored_step"] == project.committed_steps("m", 2)[-1], why
    assert [e for e in view["events"] if e["type"] == "save_cadence"], why  # "auto" chose
    assert bare["bf16-model"] not in (bare["float32"], bare["bf16"])
    assert project.outputs_hash("m") == bare["bf16-model"], why


def test_unqualified_bf16_is_refused_with_the_hint_until_nodus_qualify_passes(tmp_path):
    """The flow: refused naming the command, the command run, then accepted (~1 min)."""
    project = Project(
        tmp_path,
        program=PROGRAM,
        env={"QUICKSTART_MAX_STEPS": "2", "PRECISION": "bf16"},
        write_delay="0",
    )
    own = {IGNORE_SHIPPED: "1"}  # only this machine's records count: none for the extension
    versions = qualification.current_versions()
    qualification.record_result(str(project.home), versions, True, {})  # the v1 profile's
    refused = project.nodus("run", str(project.file), "--key", "r1", env=own, timeout=300)
    assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
    (event,) = [e for e in project.get("r1")["events"] if e["type"] == "integration_refused"]
    assert event["reasons"] == [
        "mixed precision (bf16=True) needs the hf-trainer-v1 extension 'mixed-precision', not "
        f"qualified on cpu with {qualification.describe(versions)}; run `nodus qualify "
        "--extension mixed-precision` on this machine to qualify it"
    ]

    qualify = project.nodus("qualify", "--extension", "mixed-precision", "--json", timeout=600)
    assert qualify.returncode == 0, qualify.stdout[-3000:] + qualify.stderr[-3000:]
    result = json.loads(qualify.stdout)["extensions"]["mixed-precision"]
    assert result["passed"] and result["device"] == "cpu", result

    accepted = project.nodus("run", str(project.file), "--key", "r2", env=own, timeout=300)
    assert accepted.returncode == 0, accepted.stdout[-3000:] + accepted.stderr[-3000:]
    assert project.committed_steps("r2") == [2]  # prepared: its final save was committed


def _child(project: Project, name: str, **changes) -> str:
    """The run's workload file with ``changes`` (top-level keys; ``env`` merged)."""
    import tomllib

    workload = tomllib.loads(project.file.read_text())
    del workload["execution"]["save_each_epoch"]  # a continuation makes no epoch-end saves
    env = {**workload["env"], **changes.pop("env", {})}
    workload.update(changes, env=env)
    path = project.root / f"{name}.toml"
    path.write_text(tomli_w.dumps(workload))
    return str(path)


def _newest(project: Project) -> dict:
    runs = json.loads(project.nodus("runs", "list", "--json").stdout)
    return project.get(runs[0]["id"])


def test_qualifying_mixed_precision_on_cuda_trains_an_fp16_case_too():
    from nodus.qualify import Case

    def envs(device):
        return [case.env for case in Case.all_of("mixed-precision", device)]

    assert envs("cpu") == [{"QUALIFY_PRECISION": "bf16"}]  # fp16 is refused on the CPU
    assert envs("cuda") == [{"QUALIFY_PRECISION": "bf16"}, {"QUALIFY_PRECISION": "fp16"}]
    assert [case.env for case in Case.all_of("peft", "cuda")] == [{"QUALIFY_PEFT": "1"}]
