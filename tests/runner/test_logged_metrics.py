"""A directory-contract program's own logs give its snapshots and curves their metrics.

``programs/logging_counter.py`` logs its loss with a TensorBoard ``SummaryWriter``, in
Lightning's ``metrics.csv`` or in JSON lines, each where it writes by default, and is SIGKILLed
once while it trains. Each snapshot carries the loss logged at its step
(``runs snapshots --sort loss``), and the run's curve (``Client.metrics``) is whole from step 1
to the end, the recovery marked at the step it restored: the killed attempt's points were kept
by the runner though the next attempt's working copy no longer holds its logs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from html import escape
from pathlib import Path

import pytest
from runner_helpers import running_attempt

from nodus import Client
from polling import wait_for

PROGRAMS = Path(__file__).parent / "programs"
STEPS = 30


def loss(step: int) -> float:
    sys.path.insert(0, str(PROGRAMS))
    try:
        from logging_counter import loss as program_loss
    finally:
        sys.path.remove(str(PROGRAMS))
    return program_loss(step)


def _run_id(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None


@pytest.mark.parametrize("logger", ["tensorboard", "csv", "jsonl"])
def test_a_killed_programs_logged_loss_is_in_its_snapshots_and_its_whole_curve(
    project, tmp_path, logger
):
    if logger == "tensorboard":
        pytest.importorskip("tensorboard")
    gate = tmp_path / "gate"
    (project.root / "train.py").write_bytes((PROGRAMS / "logging_counter.py").read_bytes())
    command = [sys.executable, "train.py", "--steps", str(STEPS), "--save-every", "5"]
    command += ["--logger", logger, "--sleep", "0.1", "--gate", str(gate)]
    project.write(command=command)
    runner = project.start("run", "workload.toml", "--key", logger)
    run_id = wait_for(lambda: _run_id(project, logger), what="the run")
    catalog = project.catalog()

    def settled() -> bool:
        return len(project.store().list(run=run_id)) >= 2

    wait_for(settled, what="two snapshots while it trains", timeout=120)
    attempt = running_attempt(catalog, run_id)
    assert attempt is not None and attempt["number"] == 1
    os.kill(attempt["pid"], signal.SIGKILL)
    wait_for(
        lambda: (a := running_attempt(catalog, run_id)) is not None and a["number"] == 2,
        what="the recovered attempt",
        timeout=120,
    )
    gate.touch()
    _out, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, err[-3000:]

    proc = project.nodus("runs", "snapshots", run_id, "--sort", "loss", "--json")
    listed = json.loads(proc.stdout)
    assert listed and all(row["metrics"].get("loss") == loss(row["step"]) for row in listed), [
        (row["step"], row["metrics"]) for row in listed
    ]
    assert [row["step"] for row in listed] == sorted((row["step"] for row in listed), reverse=True)

    (stage,) = Client(home=str(project.home)).metrics(run_id)
    assert stage["curves"]["loss"] == [[step, loss(step)] for step in range(1, STEPS + 1)]
    restored = project.get(run_id)["stages"][0]["attempts"][1]["restored_step"]
    assert restored >= 5
    assert stage["restarts"] == [[restored, f"recovery: attempt 2 from step {restored}"]]
    if logger == "csv":  # a column of its own, logged at each save
        assert [s for s, _ in stage["curves"]["val_loss"]] == list(range(5, STEPS + 1, 5))
    if logger == "jsonl":  # the UI's chart: a line per attempt, the recovery marked
        from nodus.ui.pages.metrics import metrics_page

        with Client(home=str(project.home), read_only=True) as client:
            page = metrics_page(client, run_id, None).live
        chart = page[page.index('data-metric="loss"') :]
        chart = chart[: chart.index("</figure>")]
        assert chart.count("<polyline") == 2 and chart.count('class="pt"') == STEPS
        assert chart.count('class="mark recovery"') == 1 and "No metrics logged" not in page


def test_a_program_that_logs_nothing_nodus_reads_is_told_where_it_could(project):
    from nodus.ui.pages.metrics import NO_METRICS, metrics_page

    project.write(steps=10, save_every=5)  # the shipped counter: it logs no metrics
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 0, proc.stderr
    (run,) = Client(home=str(project.home)).runs()
    with Client(home=str(project.home), read_only=True) as client:
        assert client.metrics(run["id"])[0]["curves"] == {}
        page = metrics_page(client, run["id"], None).live
    assert escape(NO_METRICS) in page and "[continuity] metrics" in NO_METRICS
    assert "runs/" in NO_METRICS and "metrics.jsonl" in NO_METRICS and "0 snapshot" not in page


@pytest.mark.parametrize("named", [True, False])
def test_logs_elsewhere_are_read_where_continuity_metrics_names_them(project, named):
    (project.root / "train.py").write_bytes((PROGRAMS / "logging_counter.py").read_bytes())
    command = [sys.executable, "train.py", "--steps", "10", "--save-every", "5"]
    command += ["--logger", "jsonl", "--log-to", "logs/train.jsonl"]
    project.write(command=command, body='[continuity]\nmetrics = "logs"\n' if named else "")
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 0, proc.stderr
    (run,) = Client(home=str(project.home)).runs()
    listed = json.loads(project.nodus("runs", "snapshots", run["id"], "--json").stdout)
    assert [row["step"] for row in listed] == [5, 10]
    if named:  # a folder: searched for the kinds of file nodus reads
        assert [row["metrics"] for row in listed] == [{"loss": loss(5)}, {"loss": loss(10)}]
    else:  # not one of the usual places: nothing read
        assert [row["metrics"] for row in listed] == [{}, {}]
