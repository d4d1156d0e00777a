"""Issue 11: programs in the shape of the Transformers examples recover under `nodus run`.

``programs/lm_example.py`` loads a local data file with ``load_dataset``, tokenizes and groups it
with ``map`` and trains with the plain ``Trainer`` (``run_clm.py``'s shape). Its ``datasets``
fingerprint depends on the data file's path and mtime, so these runs recover only because every
attempt runs at the same copy path with the source's mtimes and the dataset identity is its
content. Each run is a real `nodus run` whose program is SIGKILLed at random saved steps.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hf_helpers import PROGRAM_ENV, once_per_session
from runner_e2e_helpers import STAGE, Project, kill_program, steps_logged

from nodus.qualify import weights_hash
from nodus.runner.processes import procfs
from polling import WAIT_S, wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROGRAM = "lm_example.py"
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "nodus",
    "keeps",
    "every",
    "step",
    "safe",
]
LINES = [" ".join(WORDS[(i * 5 + k * 3) % len(WORDS)] for k in range(9)) + "." for i in range(110)]
STEPS = 40  # 154 blocks of 32 tokens, 8 a step: 20 steps in each of 2 epochs
FIRST_KILLS = (6, 12, 18, 20)  # inside epoch 0, or at its end
SECOND_KILLS = (24, 30, 36)  # inside epoch 1
# The library's default collator passed explicitly, exactly as run_clm.py calls the Trainer.
TEXT_ENV = {"LM_EXPLICIT_COLLATOR": "1"}
TORCHRUN = (str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "1")


def write_text(path: Path) -> None:
    path.write_text("\n".join(LINES) + "\n")


def write_jsonl(path: Path) -> None:
    path.write_text(
        "".join(json.dumps({"text": line, "n": i}) + "\n" for i, line in enumerate(LINES))
    )


def bare_hash(root: Path, code: Path, env: dict[str, str]) -> str:
    """Final weights of ``python lm_example.py`` in a plain copy of ``code``, without nodus;
    trained once per session for the same code, data and env."""
    key = [PROGRAM, sorted(env.items()), _digest(code)]
    return once_per_session(key, lambda: _bare_train(root, code, env))


def _digest(code: Path) -> str:
    """Every file of the code folder (the program and its data), by path and content."""
    hashed = hashlib.sha256()
    for path in sorted(p for p in code.rglob("*") if p.is_file()):
        hashed.update(f"{path.relative_to(code)}\0".encode() + path.read_bytes())
    return hashed.hexdigest()


def _bare_train(root: Path, code: Path, env: dict[str, str]) -> str:
    copy = root / "bare"
    shutil.copytree(code, copy)
    proc = subprocess.run(
        [sys.executable, PROGRAM],
        cwd=copy,
        capture_output=True,
        text=True,
        env=dict(os.environ, **PROGRAM_ENV, **env, HF_HOME=str(root / "bare-hf")),
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return weights_hash(str(copy / "out" / "model"))


def kill_after_commit(
    project: Project, runner, run: str, number: int, step: int, worker: bool = False
) -> None:
    """SIGKILL attempt ``number`` once it has committed the snapshot of ``step``; with
    ``worker``, the process its launcher started for the program, not the launcher."""
    attempt = wait_for(lambda: project.running(run, number), f"attempt {number}", runner)
    wait_for(
        lambda: step in project.committed_steps(run, number),
        f"attempt {number} committing step {step}",
        runner,
    )
    if worker:
        os.kill(wait_for(lambda: _worker(attempt["pid"]), "the launcher's worker", runner), 9)
    else:
        kill_program(attempt)


def _worker(launcher_pid: int) -> int | None:
    for entry in procfs.descendants(launcher_pid, procfs.table()):
        if entry.state != "Z" and PROGRAM in procfs.command_line(entry.pid):
            return entry.pid
    return None


def datasets_cache(project: Project, run: str) -> dict[str, int]:
    """Arrow files of the stage's `datasets` cache (loaded, tokenized, grouped) → mtime."""
    root = project.home / "work" / project.get_id(run) / STAGE / "cache"
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*.arrow")}


def killed_twice(
    project: Project, run: str, seed: int, worker: bool = False
) -> tuple[str, dict[str, int]]:
    """Run ``run`` killed after two random commits; why (for messages), the cache after one."""
    rng = random.Random(seed)
    first, second = rng.choice(FIRST_KILLS), rng.choice(SECOND_KILLS)
    runner = project.start("run", str(project.file), "--key", run)
    kill_after_commit(project, runner, run, 1, first, worker)
    cached = datasets_cache(project, run)
    kill_after_commit(project, runner, run, 2, second, worker)
    assert runner.wait(timeout=300) == 0, f"seed {seed}"
    return f"seed {seed}: killed after steps {first} and {second}", cached


def assert_recovered(project: Project, run: str, why: str) -> list[dict]:
    view = project.get(run)
    attempts = view["stages"][0]["attempts"]
    assert view["phase"] == "SUCCEEDED", why
    assert [a["outcome"] for a in attempts] == ["lost", "lost", "succeeded"], why
    snapshots = project.snapshots(run)
    for before, after in itertools.pairwise(attempts):  # each recovery took the newest commit
        newest = max(m.step for m in snapshots if m.attempt <= before["number"])
        assert after["restored_step"] == newest, why
    assert project.committed_steps(run, 3)[-1] == STEPS, why
    return attempts


def test_text_file_mapped_and_grouped_recovers_bit_identically_reusing_its_cache(tmp_path):
    project = Project(tmp_path, program=PROGRAM, env=TEXT_ENV)
    write_text(project.code / "train.txt")
    expected = bare_hash(tmp_path, project.code, TEXT_ENV)

    why, cached = killed_twice(project, "text", random.randrange(1 << 30))
    attempts = assert_recovered(project, "text", why)
    assert project.outputs_hash("text") == expected, why
    # The data attempt 1 loaded, tokenized and grouped stayed in the stage's cache, and the
    # later attempts read it from there: nothing was tokenized again or rewritten.
    assert len(cached) >= 3, cached
    assert datasets_cache(project, "text") == cached, why
    logs = [project.log_of(a) for a in attempts]
    assert "Tokenizing" in logs[0] and not any("Tokenizing" in log for log in logs[1:]), why


def test_json_lines_file_with_an_explicit_padding_collator_recovers_bit_identically(tmp_path):
    env = {"LM_DATA_FILE": "train.jsonl", "LM_WITH_TOKENIZER": "1", "LM_PADDING_COLLATOR": "1"}
    project = Project(tmp_path, program=PROGRAM, env=env)
    write_jsonl(project.code / "train.jsonl")
    expected = bare_hash(tmp_path, project.code, env)

    why, _cached = killed_twice(project, "jsonl", random.randrange(1 << 30))
    assert_recovered(project, "jsonl", why)
    assert project.outputs_hash("jsonl") == expected, why


def test_the_text_program_under_torchrun_recovers_from_worker_kills_bit_identically(tmp_path):
    """A world of one under ``torchrun`` is one process: killing its worker (what the OOM
    killer does) twice is recovered, and the result is that of the plain bare run."""
    project = Project(tmp_path, program=PROGRAM, env=TEXT_ENV, launcher=TORCHRUN)
    write_text(project.code / "train.txt")
    expected = bare_hash(tmp_path, project.code, TEXT_ENV)

    why, _cached = killed_twice(project, "torchrun", random.randrange(1 << 30), worker=True)
    attempts = assert_recovered(project, "torchrun", why)
    assert all("SIGKILL" in a["detail"] for a in attempts[:2]), why
    assert project.outputs_hash("torchrun") == expected, why


def test_a_data_file_edited_between_attempts_fails_the_run_naming_the_dataset(tmp_path):
    data = tmp_path / "data" / "train.txt"  # outside the code folder: not frozen in the source
    data.parent.mkdir()
    write_text(data)
    project = Project(tmp_path, program=PROGRAM, env={"LM_DATA_FILE": str(data)})
    runner = project.start("run", str(project.file), "--key", "edited")
    attempt = wait_for(lambda: project.running("edited", 1), "attempt 1", runner)
    wait_for(lambda: project.committed_steps("edited", 1), "a committed snapshot", runner)
    text = data.read_text()
    data.write_text(text.replace("quick", "quack", 1))  # one byte, in the first block
    kill_program(attempt)

    assert runner.wait(timeout=300) == 1
    view = project.get("edited")
    first, second = view["stages"][0]["attempts"]
    assert (view["phase"], first["outcome"], second["outcome"]) == (
        "FAILED",
        "lost",
        "failed",
    )
    named = f"train dataset content differs (text dataset, split train, from {data})"
    assert named in view["message"]  # what `nodus runs get` shows
    refused = [e for e in view["events"] if e["type"] == "integration_refused"]
    assert [e["attempt"] for e in refused] == [2]
    log = project.log_of(second)
    assert named in log and "Traceback" not in log
    assert steps_logged(log) == 0 and project.committed_steps("edited", 2) == []
