"""The recipes of docs/recovery.md ("Recipes: the programs people run"), each run as written.

Each recipe's workload file is taken from the docs (``doc_samples.recipe``) and run with a
program written here in the shape of the one it names (``programs/``: its save and resume
code paths, its logging), killed once with SIGKILL at a random moment after a snapshot was
taken while it trained. What must hold, and what each recipe says:

- the run succeeds, the recovery restoring the newest snapshot committed before the kill;
- nodus's recovery ends exactly where the same program resumed by hand from the same
  checkpoint ends (nodus adds no difference of its own);
- against an uninterrupted run: equal where the recipe says the program resumes exactly,
  different where it says it cannot (the program's own reason, which the recipe gives);
- what the recipe says nodus adds: the program told where to resume, the snapshots at the
  program's own steps, the metrics it logged.
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
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from runner_helpers import commits, pid_alive, running_attempt

import doc_samples
from polling import wait_for

PROGRAMS = Path(__file__).parent / "programs"
SEED = int(os.environ.get("NODUS_TEST_SEED") or random.randrange(1 << 30))
VENV_BIN = os.path.dirname(sys.executable)


@dataclass(frozen=True)
class Recipe:
    name: str  # its marker in the docs
    program: str  # the program in the shape of the one it names
    exact: bool  # what the recipe says: a resumed run ends as an uninterrupted one
    needs: str = ""  # a module the program imports
    env: tuple[tuple[str, str], ...] = ()


RECIPES = [
    Recipe("nanogpt", "nanogpt_shape.py", exact=False),
    Recipe("clm-no-trainer", "accelerate_example.py", exact=False, needs="accelerate"),
    Recipe("accelerate-checkpointing", "accelerate_example.py", exact=False, needs="accelerate"),
    Recipe(
        "lightning", "lightning_ckpt.py", exact=False, needs="lightning", env=(("TEST_USUAL", "1"),)
    ),
]


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_a_recipe_killed_at_random_continues_as_the_program_resumed_by_hand(
    project, tmp_path, recipe
):
    if recipe.needs:
        pytest.importorskip(recipe.needs)
    rng = random.Random(SEED)
    print(f"kill timing: NODUS_TEST_SEED={SEED}")
    workload = doc_samples.recipe(recipe.name)
    parsed = tomllib.loads(workload)
    command, continuity = parsed["command"], parsed.get("continuity", {})
    script = command[1]
    log = tmp_path / "program.log"
    gate = tmp_path / "done-killing"
    hooks = {"TEST_LOG": str(log), "TEST_GATE": str(gate), **dict(recipe.env)}

    # The uninterrupted run, beside the one under nodus.
    bare = _Program(tmp_path / "bare", recipe.program, script, hooks)
    uninterrupted = bare.start(command[2:])

    shutil.copy(PROGRAMS / recipe.program, project.root / script)
    env = {**hooks, "TEST_SLEEP": "0.1", "TEST_RESULT": str(tmp_path / "nodus-result.json")}
    env["PATH"] = f"{VENV_BIN}:/usr/bin:/bin"  # where `python` is this interpreter
    table = ", ".join(f"{name} = {json.dumps(value)}" for name, value in env.items())
    project.file.write_text(f"env = {{ {table} }}\n{workload}")
    runner = project.start("run", "workload.toml", "--key", recipe.name)
    run_id = wait_for(lambda: _run_id(project, recipe.name) or runner.poll(), what="the run")
    assert isinstance(run_id, str), runner.communicate()[1][-3000:]

    attempt = wait_for(lambda: running_attempt(project.catalog(), run_id), what="its program")
    wait_for(lambda: _settled(project, run_id), what="a snapshot taken while it trains")
    time.sleep(rng.uniform(0.0, 1.0))  # a random moment of its training
    committed = max(_settled(project, run_id))
    if pid_alive(attempt["pid"]):
        os.kill(attempt["pid"], signal.SIGKILL)
    wait_for(lambda: _next_attempt(project, run_id, attempt["number"]), what="the recovery")
    gate.touch()
    _out, err = runner.communicate(timeout=600)
    assert runner.returncode == 0, err[-3000:]

    run = project.get(run_id)
    attempts = run["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"]
    restored = attempts[1]
    assert restored["restored_step"] >= committed  # the newest snapshot when it was killed
    recovered = json.loads((tmp_path / "nodus-result.json").read_text())

    # The same program resumed by hand from the snapshot the recovery restored.
    project.store().restore(restored["restored_snapshot"], str(tmp_path / "by-hand"))
    by_hand = _Program(tmp_path / "by-hand", recipe.program, script, hooks)
    told = _resume_args(continuity, log, by_hand.folder)
    assert by_hand.start([*command[2:], *told]).result() == recovered

    assert (uninterrupted.result() == recovered) is recipe.exact
    ADDS[recipe.name](project, run_id, restored, _resumed(log))


def _resumed(log: Path) -> str:
    """What the recovered program said it resumed from (its one ``resume …`` line)."""
    (line,) = [line for line in log.read_text().splitlines() if line.split()[1] == "resume"]
    return line.split(" ", 2)[2]


def _snapshots(project, run_id: str) -> list[dict]:
    listed = project.nodus("runs", "snapshots", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def _told_its_step(project, run_id, restored, resumed) -> None:
    """The restored attempt was handed the folder of the restored snapshot's step."""
    assert resumed.endswith(f"step_{restored['restored_step']} step={restored['restored_step']}")


def _lightning(project, run_id, restored, resumed) -> None:
    """Snapshots at Lightning's global step and epoch, with the loss its logger wrote."""
    # Lightning resumes from last.ckpt, written right after the step's own file: a kill between
    # the two leaves the previous last.ckpt beside the newer file the snapshot is named for.
    resumed_step = int(resumed.removeprefix("last.ckpt step="))
    assert 0 < resumed_step <= restored["restored_step"], resumed
    rows = _snapshots(project, run_id)
    assert rows and all(row["epoch"] is not None for row in rows), rows
    assert all("train_loss" in row["metrics"] for row in rows), rows


def _nanogpt(project, run_id, restored, resumed) -> None:
    """Snapshots at the ``iter_num`` inside ``ckpt.pt``; the save made again at once after the
    resume is the restored step, not a new one."""
    assert resumed == f"iter_num={restored['restored_step']}"
    rows = _snapshots(project, run_id)
    assert rows and all(row["step_source"] == "checkpoint" for row in rows), rows
    assert all(row["step"] % 5 == 0 for row in rows), rows  # --eval_interval=5


ADDS = {
    "nanogpt": _nanogpt,
    "clm-no-trainer": _told_its_step,
    "accelerate-checkpointing": _told_its_step,
    "lightning": _lightning,
}


class _Program:
    """The recipe's program run without nodus, in a folder of its own, in the background."""

    def __init__(self, folder: Path, program: str, script: str, hooks: dict) -> None:
        self.folder = folder
        folder.mkdir(exist_ok=True)
        shutil.copy(PROGRAMS / program, folder / script)
        self.script = script
        self.env = {**os.environ, **hooks, "TEST_RESULT": str(folder / "result.json")}
        self.env["TEST_LOG"] = str(folder / "program.log")

    def start(self, args: list[str]) -> _Program:
        self.proc = subprocess.Popen(
            [sys.executable, self.script, *args],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        return self

    def result(self) -> dict:
        _out, err = self.proc.communicate(timeout=600)
        assert self.proc.returncode == 0, err[-3000:]
        return json.loads((self.folder / "result.json").read_text())


def _resume_args(continuity: dict, log: Path, folder: Path) -> list[str]:
    """The recipe's ``resume_args`` for a resume by hand in ``folder``: ``{checkpoint}`` is
    the restored checkpoint nodus named to its program, at the same place in ``folder``."""
    args = continuity.get("resume_args", [])
    if not any("{checkpoint}" in arg for arg in args):
        return list(args)
    (named,) = [
        line.split()[2] for line in log.read_text().splitlines() if line.split()[1] == "resume"
    ]
    relative = named.split("/copy/", 1)[1]
    return [arg.replace("{checkpoint}", str(folder / relative)) for arg in args]


def _run_id(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None


def _settled(project, run_id: str) -> list[int]:
    return [c["step"] for c in commits(project, run_id) if c["reason"] == "settled"]


def _next_attempt(project, run_id: str, after: int) -> bool:
    attempt = running_attempt(project.catalog(), run_id)
    return attempt is not None and attempt["number"] > after
