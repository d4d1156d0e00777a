"""Issue 28 extensions 1c and 1d under the real runner: dataloader workers and the collators.

``programs/data_pipeline.py`` feeds the quick-start's lines through one of the library's batch
builders. Each run is compared bit for bit with a bare ``python data_pipeline.py`` (no nodus):

- a BERT masked LM with ``DataCollatorForLanguageModeling`` (random masks, gradient accumulation
  2), SIGKILLed twice at random, paused and resumed;
- the quick-start with 2 persistent dataloader workers, saving on ``auto``, SIGKILLed twice at
  random (its workers die with it), stopped by a preemption notice and resumed;
- the other collators (whole-word masking from the collator's own seeded generator, seq2seq
  padding inside 2 non-persistent workers, token-classification padding), each killed once
  inside a later epoch.

Both extensions are refused with the qualify hint where the machine's own records are all that
counts (``NODUS_IGNORE_SHIPPED_QUALIFICATIONS=1``), and a run resuming another's snapshot with
other collator settings or another worker count is refused naming both values. Real Trainers
built in this process show what the profile admits and refuses, and what the identity records.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hf_helpers import PROGRAMS, bare_run_hash
from runner_e2e_helpers import NODUS, Project, kill_program, pid_alive

from nodus.schemas.defaults import ENV_IGNORE_SHIPPED_QUALIFICATIONS as IGNORE_SHIPPED
from nodus.stages.hf import extensions
from nodus.stages.hf.inprocess import identity as identities
from nodus.stages.hf.inprocess import profile
from polling import wait_for
from scheduling import ML_IN_PROCESS

pytestmark = pytest.mark.hf

PROGRAM = "data_pipeline.py"


@pytest.fixture
def short_root():
    """A project folder with a short path: dataloader workers hand batches over an AF_UNIX
    socket in the attempt's ``$TMPDIR`` under ``$NODUS_HOME``, whose path must stay under 108
    bytes (see tests/hf/test_profile.py)."""
    root = Path(tempfile.mkdtemp(prefix="nodus-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _start(project: Project, env: dict, *args: str) -> subprocess.Popen:
    """``Project.start`` with ``env`` added to the runner's environment (programs inherit it)."""
    path = project.root / f"nodus-{args[0]}.log"
    with open(path, "w") as log:
        process = subprocess.Popen(
            [*NODUS, *args],
            cwd=project.root,
            env=project.env(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    process.log_path = path  # type: ignore[attr-defined]
    return process


def _kill_after_commit(project: Project, runner, key: str, number: int, step: int) -> dict:
    """SIGKILL attempt ``number`` once it committed a snapshot of ``step`` or later."""
    attempt = wait_for(lambda: project.running(key, number), f"attempt {number}", runner)
    wait_for(
        lambda: [s for s in project.committed_steps(key, number) if s >= step],
        f"attempt {number} committing step {step} or later",
        runner,
    )
    kill_program(attempt)
    return attempt


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except OSError:
                continue
    return found


def _refused_before_qualified(project: Project, runner_env: dict, extension: str) -> None:
    """Only this machine's records count (none): explicit v1 refuses, naming the command."""
    proc = project.nodus(
        "run", str(project.file), "--key", "early", env={**runner_env, IGNORE_SHIPPED: "1"}
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    view = project.get("early")
    refused = [e for e in view["events"] if e["type"] == "integration_refused"]
    hint = extensions.qualify_command([extension])
    assert refused and any(hint in reason for reason in refused[0]["reasons"]), refused
    assert hint in project.log_of(view["stages"][0]["attempts"][0])


def _refused_with(project: Project, parent: str, step: int, env: dict, *named: str) -> None:
    """A run resuming ``parent@step`` with other settings is refused naming ``named``."""
    workload = tomllib.loads(project.file.read_text())
    del workload["execution"]["save_each_epoch"]  # a continuation makes no epoch-end saves
    child = project.root / "child.toml"
    child.write_text(tomli_w.dumps(workload))
    proc = project.nodus(
        "run", str(child), "--key", "changed", "--resume-from", f"{parent}@{step}", env=env
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    refused = [e for e in project.get("changed")["events"] if e["type"] == "integration_refused"]
    reasons = "\n".join(refused[0]["reasons"]) if refused else ""
    for words in named:
        assert words in reasons, reasons


# --- 1d: a masked LM (DataCollatorForLanguageModeling) ------------------------------------------

MLM_ENV = {"PIPELINE": "mlm", "GA": "2"}  # 6 optimizer steps per epoch, 4 epochs


@pytest.mark.slow
def test_masked_lm_killed_twice_paused_and_resumed_ends_bit_identical(short_root):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    first = rng.choice([2, 4, 8])  # inside epoch 0 or 1 (saves every 2 steps, epochs of 6)
    second = rng.choice([16, 20])  # inside epoch 2 or 3, after the pause
    why = f"random seed {seed}: killed after {first}, paused after 12, killed after {second}"
    project = Project(short_root, program=PROGRAM, env=MLM_ENV, save_every=2, write_delay="0.5")
    bare = bare_run_hash(short_root, str(PROGRAMS / PROGRAM), MLM_ENV)
    _refused_before_qualified(project, {}, extensions.COLLATORS)

    runner = project.start("run", str(project.file), "--key", "m")
    _kill_after_commit(project, runner, "m", 1, first)
    wait_for(lambda: project.running("m", 2), "attempt 2", runner)
    wait_for(lambda: 12 in project.committed_steps("m", 2), "step 12 committed", runner)
    paused = project.nodus("runs", "pause", "m", "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=300) == 3, why  # PAUSED
    at = project.committed_steps("m", 2)[-1]

    runner = project.start("runs", "resume", "m")
    _kill_after_commit(project, runner, "m", 3, max(second, at + 1))
    assert runner.wait(timeout=300) == 0, why
    view = project.get("m")
    attempts = view["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "paused", "lost", "succeeded"]
    assert attempts[2]["restored_step"] == at, why  # the pause's save, no step lost
    steps = project.committed_steps("m")
    assert {6, 12, 18, 24} <= set(steps) and {2, 4, 10} & set(steps), steps  # epochs, cadence
    assert project.outputs_hash("m") == bare, why

    # a full-state branch from inside an epoch: the branch's first batches are the pending
    # collations that snapshot recorded
    inside = max(s for s in steps if s % 6 and s > 12)
    branched = project.nodus("runs", "branch", f"m@{inside}", "--from", "full-state", timeout=300)
    assert branched.returncode == 0, branched.stdout[-3000:] + branched.stderr[-3000:]
    child = json.loads(project.nodus("runs", "list", "--json").stdout)[0]["id"]
    assert project.get(child)["parent"]["step"] == inside, why
    assert project.outputs_hash(child) == bare, why

    _refused_with(
        project,
        "m",
        steps[0],
        {"MLM_PROBABILITY": "0.2"},
        "data collator (what builds the batches) differs",
        "mlm_probability=0.15",
        "mlm_probability=0.2",
    )


# --- 1c: two persistent dataloader workers ------------------------------------------------------

WORKERS = {"WORKERS": "2", "PERSISTENT": "1"}  # the runner's env: a resume may change it


@pytest.mark.slow
def test_persistent_workers_killed_twice_and_stopped_by_a_notice_end_bit_identical(short_root):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    first = rng.choice([5, 12, 17])
    second = rng.choice([26, 30])
    why = f"random seed {seed}: killed after {first} and {second}, SIGTERM after 36"
    env = {"PIPELINE": "default"}
    project = Project(short_root, program=PROGRAM, env=env, save_every="auto", write_delay="0.2")
    bare = bare_run_hash(short_root, str(PROGRAMS / PROGRAM), {**env, **WORKERS})
    _refused_before_qualified(project, WORKERS, extensions.WORKERS)

    runner = _start(project, WORKERS, "run", str(project.file), "--key", "w")
    attempt = wait_for(lambda: project.running("w", 1), "attempt 1", runner)
    workers = wait_for(
        lambda: (lambda found: found if len(found) >= 2 else None)(_children(attempt["pid"])),
        "the dataloader workers",
        runner,
    )
    _kill_after_commit(project, runner, "w", 1, first)
    wait_for(
        lambda: not [pid for pid in workers if pid_alive(pid)],
        f"the killed program's workers {workers} ending",
        timeout=60,
    )
    _kill_after_commit(project, runner, "w", 2, second)
    wait_for(lambda: project.running("w", 3), "attempt 3", runner)
    wait_for(lambda: [s for s in project.committed_steps("w", 3) if s >= 36], "step 36", runner)
    runner.send_signal(signal.SIGTERM)  # a preemption notice
    assert runner.wait(timeout=300) == 3, why
    stopped = project.get("w")["stages"][0]["attempts"][2]
    assert stopped["outcome"] == "preempted", why

    resumed = project.nodus("runs", "resume", "w", env=WORKERS)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    view = project.get("w")
    attempts = view["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == [
        "lost",
        "lost",
        "preempted",
        "succeeded",
    ]
    assert attempts[3]["restored_step"] == project.committed_steps("w", 3)[-1], why
    assert project.outputs_hash("w") == bare, why
    cadence = [e for e in view["events"] if e["type"] == "save_cadence"]
    assert cadence, "save_every = auto reported no cadence"

    _refused_with(
        project,
        "w",
        project.committed_steps("w")[0],
        {"WORKERS": "0", "PERSISTENT": "0"},
        "dataloader workers differs: checkpoint has '2, persistent', this attempt has '0'",
    )


# --- the other collators, non-persistent workers: one kill each, inside a later epoch -----------

ONE_KILL = {"QUICKSTART_EPOCHS": "2", "QUICKSTART_EXAMPLES": "48"}  # 6 steps per epoch


@pytest.mark.slow
@pytest.mark.parametrize(
    "env",
    [
        {"PIPELINE": "wwm", "COLLATOR_SEED": "7"},  # masks from the collator's own generator
        {"PIPELINE": "seq2seq", "WORKERS": "2"},  # padding inside non-persistent workers
        {"PIPELINE": "tokens"},
    ],
    ids=["whole-word-mask-seeded", "seq2seq-in-2-workers", "token-classification"],
)
def test_killed_inside_a_later_epoch_ends_bit_identical(short_root, env):
    seed = random.randrange(1 << 30)
    step = random.Random(seed).choice([7, 8])
    why = f"random seed {seed}: killed after {step}"
    env = {**ONE_KILL, **env}
    project = Project(short_root, program=PROGRAM, env=env, save_every=1, write_delay="0.3")
    bare = bare_run_hash(short_root, str(PROGRAMS / PROGRAM), env)
    runner = project.start("run", str(project.file), "--key", "k")
    _kill_after_commit(project, runner, "k", 1, step)
    assert runner.wait(timeout=300) == 0, why
    attempts = project.get("k")["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"], why
    assert attempts[1]["restored_step"] % 6, why  # resumed inside epoch 1
    assert project.outputs_hash("k") == bare, why


# --- the profile and the identity, on real Trainers built in this process -------------------------


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """``data_pipeline.py`` as a module (its builders), and a Trainer factory."""
    from hf_helpers import QUICKSTART
    from transformers import Trainer

    sys.path.insert(0, str(QUICKSTART))  # the program imports the quick-start's train.py
    try:
        spec = importlib.util.spec_from_file_location("data_pipeline", PROGRAMS / PROGRAM)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(QUICKSTART))
    out = tmp_path_factory.mktemp("trainer")

    def build(kind: str, workers: int = 0, **collator_settings):
        args = dataclasses.replace(
            module.train.training_arguments(),
            output_dir=str(out),
            dataloader_num_workers=workers,
        )
        tokenizer, model, data, collator = module.build(kind, args)
        for name, value in collator_settings.items():
            setattr(collator, name, value)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            data_collator=collator,
        )
        return trainer, {"data_collator": collator}

    cwd = os.getcwd()
    os.chdir(QUICKSTART)  # the records are train.txt's lines, read from the working directory
    try:
        yield build
    finally:
        os.chdir(cwd)


@ML_IN_PROCESS
@pytest.mark.parametrize("kind", ["mlm", "wwm"])
def test_random_masking_inside_dataloader_workers_is_refused_as_not_supported_yet(pipeline, kind):
    found = profile.assess(*pipeline(kind, workers=2))
    assert len(found.reasons) == 1, found.reasons
    assert (
        "masking at random in dataloader_num_workers=2 workers: not supported yet"
        in (found.reasons[0])
    )
    assert set(found.extensions) == {extensions.COLLATORS, extensions.WORKERS}


@ML_IN_PROCESS
@pytest.mark.parametrize("kind", ["clm", "seq2seq", "tokens"])
def test_padding_collators_inside_dataloader_workers_are_both_extensions(pipeline, kind):
    found = profile.assess(*pipeline(kind, workers=2))
    assert found.reasons == []
    assert set(found.extensions) == {extensions.COLLATORS, extensions.WORKERS}


@ML_IN_PROCESS
def test_the_collators_settings_are_the_identity_and_a_model_is_named_by_its_class(pipeline):
    seq2seq = identities.compute(pipeline("seq2seq")[0])["data_collator"]
    assert seq2seq.startswith("DataCollatorForSeq2Seq(model=<transformers.models.t5.")
    assert "T5ForConditionalGeneration>, padding=True" in seq2seq and "\n" not in seq2seq
    masked = identities.compute(pipeline("mlm")[0])
    other = identities.compute(pipeline("mlm", mlm_probability=0.3)[0])
    [line] = identities.differences(masked, other)
    assert line.startswith(identities.LABELS["data_collator"]), line
    assert "mlm_probability=0.15" in line and "mlm_probability=0.3" in line
