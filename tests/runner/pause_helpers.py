"""Helpers of the pause, resume and cancel tests (imported as ``pause_helpers``).

The counter runs use :class:`runner_helpers.Project`; the Trainer run uses the quick-start
program as shipped, in a project of its own, and compares its final weights with a bare
``python train.py`` run of the same program (no nodus at all).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from runner_helpers import Project

from nodus import protocol
from nodus.runner.catalog.core import Catalog
from polling import wait_for

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
# 12 optimizer steps per epoch, 2 epochs: saves every 6 steps, inside and at epoch ends.
TRAINER_ENV = {
    "WANDB_MODE": "disabled",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "QUICKSTART_EPOCHS": "2",
    "QUICKSTART_SEED": "7",
}
# Each save waits this long before it is published, so training crawls from save to save and
# a pause lands mid-run on a loaded machine. It never changes what is trained.
SLOW_SAVES = {protocol.ENV_WRITE_DELAY: "1.0"}

# A directory-contract program that publishes checkpoint-1, then ignores SIGTERM: a pause that
# asks it to save stays pending until its deadline, whatever the machine's speed.
STUBBORN = textwrap.dedent("""
    import json, os, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    building = os.path.join(os.environ["TMPDIR"], "checkpoint-1")
    os.makedirs(building)
    with open(os.path.join(building, "state.json"), "w") as handle:
        json.dump({"step": 1}, handle)
    os.rename(building, os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "checkpoint-1"))
    print("stubborn: saved checkpoint-1, ignoring SIGTERM from now on", flush=True)
    time.sleep(3600)
""")


def trainer_project(root: Path, home: Path) -> Project:
    """The quick-start code with a workload that runs it under hf-trainer-v1."""
    code = root / "code"
    shutil.copytree(
        QUICKSTART, code, ignore=shutil.ignore_patterns("out", "state", ".nodus", "__pycache__")
    )
    project = Project(code, home)
    project.file.write_text(
        textwrap.dedent(f"""
        name = "quickstart-pause"
        command = {json.dumps([sys.executable, "train.py"])}
        integration = "hf-trainer-v1"
        outputs = ["out/model"]
        env = {json.dumps({**TRAINER_ENV, "PYTHONUNBUFFERED": "1"}).replace('":', '" =')}
        [execution]
        save_every = 6
        save_each_epoch = true
    """)
    )
    return project


def bare_weights(root: Path) -> str:
    """Final weights of the quick-start run uninterrupted and without nodus."""
    from nodus.qualify import weights_hash

    copy = root / "bare"
    shutil.copytree(
        QUICKSTART, copy, ignore=shutil.ignore_patterns("out", "state", ".nodus", "__pycache__")
    )
    proc = subprocess.run(
        [sys.executable, "train.py"],
        cwd=copy,
        capture_output=True,
        text=True,
        env=dict(os.environ, **TRAINER_ENV),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return weights_hash(str(copy / "out" / "model"))


def output_weights(project: Project, run_id: str) -> str:
    """Final weights as `nodus runs outputs` hands them to a user."""
    from nodus.qualify import weights_hash

    target = project.root.parent / f"outputs-{run_id}"
    proc = project.nodus("runs", "outputs", run_id, "--to", str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return weights_hash(str(target / "out" / "model"))


def run_id_of(project: Project, key: str) -> str:
    """The id of the run accepted under ``key`` (waits for the acceptance)."""

    def find():
        if not project.home.exists():
            return None
        run = Catalog(str(project.home)).find_by_key(key)
        return run.id if run else None

    return wait_for(find, what=f"the run under key {key!r}")


def phase(project: Project, run_id: str) -> str:
    return Catalog(str(project.home)).get_run(run_id).phase


def pause_of(project: Project, run_id: str) -> dict:
    """The `pause` object of `nodus runs get --json`."""
    return project.get(run_id)["pause"]
