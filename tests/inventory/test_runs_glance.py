"""`nodus runs list`: each run's duration, step (or capture) and newest logged loss, in the table
and in `--json`, read from what the runner keeps (a program's progress, the metrics it logged,
the newest committed snapshot), never from the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nodus.cli import main
from nodus.protocol import Progress
from nodus.runner.catalog.core import Catalog
from nodus.runner.workspace.layout import Workspace


@pytest.fixture
def catalog(tmp_path):
    catalog = Catalog(str(tmp_path / "home"))
    yield catalog
    catalog.close()


def started(catalog: Catalog, name: str) -> tuple[str, Workspace]:
    """A run whose stage ``main`` has an attempt going, with its output file where the runner
    puts it."""
    run_id = catalog.create_run(
        name=name, workload={}, store="", key=None, lock_name=f"lock-{name}", stage_names=["main"]
    )
    ws = Workspace.of(catalog.home, run_id, "main")
    os.makedirs(ws.attempt_folder)
    open(ws.log_path, "w").close()
    catalog.start_attempt(run_id, "main", log_path=ws.log_path)
    return run_id, ws


def listing(capsys, catalog: Catalog) -> dict[str, dict]:
    assert main(["--home", catalog.home, "runs", "list", "--json"]) == 0
    return {row["id"]: row for row in json.loads(capsys.readouterr().out)}


def test_logged_metrics_give_the_step_and_the_newest_loss(capsys, catalog):
    run_id, ws = started(catalog, "logged")
    points = [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 1.25}, {"step": 3, "lr": 0.1}]
    with open(ws.metrics_path, "w") as handle:
        handle.writelines(json.dumps(point) + "\n" for point in points)
    row = listing(capsys, catalog)[run_id]
    assert (row["step"], row["capture"], row["loss"]) == (3, None, 1.25)
    assert row["duration_seconds"] >= 0


def test_a_programs_progress_gives_its_step_and_loss(capsys, catalog):
    run_id, ws = started(catalog, "reporting")
    os.makedirs(os.path.dirname(ws.control.progress), exist_ok=True)
    progress = Progress(step=40, max_steps=100, loss=0.75, steps_per_second=3.0, at=9e9)
    with open(ws.control.progress, "w") as handle:
        json.dump(progress.to_dict(), handle)
    row = listing(capsys, catalog)[run_id]
    assert (row["step"], row["loss"]) == (40, 0.75)


def test_without_logs_the_newest_snapshot_gives_the_step_or_its_capture(capsys, catalog):
    stepped, _ = started(catalog, "stepped")
    details = {"snapshot": "ckpt_1", "step": 30, "reason": "settled"}
    catalog.add_event(stepped, "snapshot_committed", details, stage="main")
    counted, _ = started(catalog, "counted")
    details = {"snapshot": "ckpt_2", "step": 3, "reason": "settled", "counted": True}
    catalog.add_event(counted, "snapshot_committed", details, stage="main")
    rows = listing(capsys, catalog)
    assert (rows[stepped]["step"], rows[stepped]["capture"]) == (30, None)
    assert (rows[counted]["step"], rows[counted]["capture"]) == (None, 3)
    assert rows[stepped]["loss"] is None


def test_the_table_shows_duration_step_and_loss(capsys, catalog):
    run_id, ws = started(catalog, "logged")
    with open(ws.metrics_path, "w") as handle:
        handle.write(json.dumps({"step": 7, "loss": 0.123456}) + "\n")
    fresh = catalog.create_run(
        name="fresh", workload={}, store="", key=None, lock_name="l2", stage_names=["main"]
    )
    assert main(["--home", catalog.home, "runs", "list"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "ID",
        "KEY",
        "NAME",
        "PHASE",
        "EXIT",
        "CREATED",
        "DURATION",
        "STEP",
        "LOSS",
        "FROM",
    ]
    [logged] = [line for line in lines if line.startswith(run_id)]
    assert " s  " in logged and "  7  " in logged and "  0.1235  " in logged
    [unstarted] = [line for line in lines if line.startswith(fresh)]
    assert unstarted.split()[-4:] == ["-", "-", "-", "-"]  # duration, step, loss, from
    assert listing(capsys, catalog)[fresh]["duration_seconds"] is None


@pytest.mark.slow
def test_a_real_run_lists_its_logged_step_and_loss(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(
        "import json\n"
        "with open('metrics.jsonl', 'w') as f:\n"
        "    for step in range(1, 6):\n"
        "        f.write(json.dumps({'step': step, 'loss': 2.0 / step}) + '\\n')\n"
    )
    workload = f'name = "m"\ncommand = ["{sys.executable}", "train.py"]\n'
    (code / "nodus.toml").write_text(workload + 'continuity = "restartable"\n')
    env = {**os.environ, "NODUS_HOME": str(tmp_path / "home")}

    def nodus(*args: str) -> str:
        command = [sys.executable, "-m", "nodus", *args]
        done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    nodus("run", "nodus.toml")
    [row] = json.loads(nodus("runs", "list", "--json"))
    assert (row["phase"], row["step"], row["loss"]) == ("SUCCEEDED", 5, 0.4)
    assert row["duration_seconds"] is not None
    table = nodus("runs", "list").splitlines()
    assert table[1].split()[-3:] == ["5", "0.4", "-"]
