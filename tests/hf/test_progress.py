"""A running Trainer run's progress at a glance: `runs get` (text and --json) and
`Client.progress` show its step of the total, the last loss, its speed, the time left and the
newest committed snapshot, read while it trains."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodus import Client, protocol
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
NODUS = [sys.executable, "-m", "nodus"]


def test_runs_get_of_a_running_trainer_shows_where_it_stands(tmp_path):
    code = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, code, ignore=shutil.ignore_patterns(".nodus*"))
    workload = (code / "workload.toml").read_text()
    (code / "workload.toml").write_text(
        workload.replace('["python", "train.py"]', json.dumps([sys.executable, "train.py"]))
    )
    env = {**os.environ, "NODUS_HOME": str(tmp_path / "home")}
    env[protocol.ENV_WRITE_DELAY] = "1.0"  # eight saves held a second each: time to look
    env.pop("NODUS_STORE", None)

    def nodus(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*NODUS, *args], cwd=code, env=env, capture_output=True, text=True, timeout=300
        )

    assert nodus("run", "workload.toml", "--key", "p", "--detach").returncode == 0

    def trained_with_a_snapshot() -> dict | None:
        progress = json.loads(nodus("runs", "get", "p", "--json").stdout)["progress"]
        ready = progress and progress["loss"] is not None and progress["newest_snapshot"]
        return progress if ready else None

    progress = wait_for(trained_with_a_snapshot, "a logged loss and a committed snapshot")
    assert (progress["stage"], progress["attempt"], progress["total_steps"]) == ("main", 1, 48)
    assert 0 < progress["step"] <= 48 and progress["steps_per_second"] > 0
    assert progress["eta_seconds"] >= 0 and progress["updated_at"].endswith("Z")
    newest = progress["newest_snapshot"]
    assert newest["step"] % 6 == 0 and newest["id"].startswith("ckpt_")
    assert newest["age_seconds"] >= 0
    shown = nodus("runs", "get", "p").stdout
    assert "  progress: step " in shown and " of 48, loss " in shown and "newest snapshot" in shown
    assert Client(tmp_path / "home").progress("p")["total_steps"] == 48

    waited = nodus("runs", "wait", "p")
    assert waited.returncode == 0 and "SUCCEEDED" in waited.stdout
    assert json.loads(nodus("runs", "get", "p", "--json").stdout)["progress"] is None
