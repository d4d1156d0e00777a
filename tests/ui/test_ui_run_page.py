"""A run's page answers "what ran, how is it doing", in headless Chromium against real runs:
the command, interpreter, program arguments and resolved workload; a Trainer's arguments (the
quick-start under hf-trainer-v1); a running attempt's CPU and memory (and no GPU on a machine
without one); events filtered by type with retention's deletions collapsed; a banner per
outcome, each sentence once; counts that say what they count."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import Dom, dom, screenshot
from webdriver import Browser, leftovers

from conftest import PROGRAM, Home, UiProcess, _committed, _run_id, _running
from nodus import protocol
from nodus.client import Client
from nodus.runner.catalog.core import Catalog
from polling import wait_for

pytestmark = pytest.mark.slow  # real runs through the real runner, then a browser

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def _write(home: Home, name: str, command: list[str], body: str) -> str:
    path = home.code / f"{name}.toml"
    path.write_text(f'name = "{name}"\ncommand = {json.dumps(command)}\n{body}')
    return str(path)


def _rotated(home: Home) -> str:
    """A run that kept one snapshot whole: retention deleted the older ones' kinds."""
    command = [
        sys.executable,
        str(PROGRAM),
        "--steps",
        "30",
        "--save-every",
        "5",
        "--sleep",
        "0.05",
    ]
    body = 'outputs = ["out"]\n[execution]\nkeep_recoverable = 1\nkeep_adapters = 1\n'
    done = home.nodus("run", _write(home, "rotated", command, body), "--key", "rotated")
    assert done.returncode == 0, done.stderr[-2000:]
    return _run_id(home, "rotated")


def _trainer(home: Home) -> str:
    """The quick-start under hf-trainer-v1, one epoch."""
    code = home.code / "quickstart"
    shutil.copytree(QUICKSTART, code, ignore=shutil.ignore_patterns("out", "state", ".nodus"))
    env = {"QUICKSTART_EPOCHS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    body = (
        f'code = "{code}"\nintegration = "{protocol.INTEGRATION_HF_TRAINER_V1}"\n'
        f'outputs = ["out/model"]\nenv = {json.dumps(env).replace(":", " =")}\n'
        '[continuity]\nmode = "checkpointed"\ncheckpoint_paths = ["state"]\n'
    )
    file = _write(home, "trainer", [sys.executable, "train.py"], body)
    done = home.nodus("run", file, "--key", "trainer", timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return _run_id(home, "trainer")


@pytest.fixture(scope="module")
def more(tmp_path_factory) -> Iterator[tuple[Home, UiProcess]]:
    root = tmp_path_factory.mktemp("ui-run-page")
    home = Home(root / "home", root / "code", {})
    home.code.mkdir(parents=True)
    home.runs["rotated"] = _rotated(home)
    server = UiProcess(home.path)
    yield home, server
    server.stop()


@pytest.fixture(scope="module")
def trainer(more) -> tuple[Home, UiProcess]:
    """The same home, with the quick-start's run added (the page reads the catalog live)."""
    home, server = more
    home.runs["trainer"] = _trainer(home)
    return home, server


@pytest.fixture
def browser() -> Iterator[Browser]:
    with Browser() as driver:
        yield driver
    assert leftovers(driver.profile) == []


def _facts(page: Dom, cls: str = "ran") -> dict[str, str]:
    facts = page.find("dl", cls)[0]  # the first: a run's facts come before what ran
    keys = [page.text(e) for e in page.inside(facts, "dt")]
    return dict(zip(keys, [page.text(e) for e in page.inside(facts, "dd")]))


def test_a_run_page_says_what_ran_and_that_it_succeeded_after_its_recovery(runs_home, ui):
    run_id = runs_home.runs["recovered"]
    page = dom(f"{ui.base}/runs/{run_id}")
    ran = _facts(page)
    assert ran["command"].endswith("curve_counter.py --steps 40 --save-every 5 --sleep 0.08")
    assert ran["runs"] == sys.executable
    assert ran["interpreter"] == f"Python {sys.version.split()[0]}"
    assert ran["arguments"] == "--steps 40 --save-every 5 --sleep 0.08"
    (workload,) = page.find("pre", "workload")
    resolved = json.loads(page.text(workload))  # readable, and exactly what nodus resolved
    assert resolved["stages"][0]["execution"]["keep_recoverable"] == 100
    assert resolved["stages"][0]["execution"]["max_recoveries"] == 10  # a default, explicit
    # a success that mentions the recovery, never a red "what went wrong"
    assert page.find("section", "failures") == []
    (said,) = page.find("section", "banner")
    assert said[1]["data-banner"] == "recovered"
    lines = [page.text(li) for li in page.inside(said, "li")]
    assert lines[0] == "SUCCEEDED after 1 recovery"
    assert "attempt 1 lost: killed by SIGKILL" in lines[1]
    assert "attempt 2 continued from step " in lines[1]
    # counts that say what they count: the checkpoints the table lists, the source apart
    with Client(runs_home.path, read_only=True) as client:
        snapshots = client.snapshots(run_id)
    facts = _facts(page, "facts")
    assert facts["stored"].startswith(f"{len(snapshots)} checkpoints, the source and the outputs")
    assert f"Snapshots: {len(snapshots)} checkpoints" in [page.text(h) for h in page.find("h2")]
    assert len(page.find("tr", "snapshot")) == len(snapshots)


def test_a_failed_run_says_its_failure_once(runs_home, ui):
    page = dom(f"{ui.base}/runs/{runs_home.runs['failed']}")
    (said,) = page.find("section", "failures")
    assert said[1]["data-banner"] == "failure"
    lines = [page.text(li) for li in page.inside(said, "li")]
    assert lines[0].startswith("FAILED: main attempt 1 failed: ")
    assert lines[0].endswith("exited with status 1")
    assert page.text(said).count("exited with status 1") == 1  # not FAILED: … and attempt 1: …
    facts = _facts(page, "facts")
    assert facts["stored"].startswith("1 checkpoint and the source: ")


@pytest.mark.hf
def test_a_trainer_runs_page_shows_its_training_arguments(trainer):
    home, server = trainer
    run_id = home.runs["trainer"]
    with Client(home.path, read_only=True) as client:
        events = client.get(run_id)["events"]
    said = [e for e in events if e["type"] == protocol.EVENT_TRAINING_ARGUMENTS]
    assert [e["attempt"] for e in said] == [1]  # once per attempt
    assert said[0]["arguments"]["learning_rate"] == 1e-3  # the quick-start's own
    url = f"{server.base}/runs/{run_id}"
    page = dom(url)
    (first,) = page.find("details", "trainer")
    assert page.text(page.inside(first, "summary")[0]) == "the Trainer's arguments (attempt 1)"
    rows = {page.cells(r)[0]: page.cells(r)[1] for r in page.inside(first, "tr", "argument")}
    assert rows["learning_rate"] == "0.001" and rows["per_device_train_batch_size"] == "8"
    assert rows["num_train_epochs"] == "1" and rows["output_dir"] == "out/trainer"
    (every,) = page.find("details", "trainer-all")
    assert len(page.inside(every, "tr", "argument")) == len(said[0]["arguments"]) > 50
    assert "arguments" not in _facts(page)  # a Trainer's are its TrainingArguments
    assert _facts(page)["command"] == f"{sys.executable} train.py"
    screenshot(url, "ui-run-trainer.png", height=900)


VISIBLE = """return Array.from(document.querySelectorAll('tr.event, tr.event-group'))
    .filter(r => !r.hidden && r.offsetParent !== null).map(r => r.dataset.type);"""


def test_events_filter_by_type_and_retention_deletions_expand(more, browser):
    home, server = more
    run_id = home.runs["rotated"]
    with Client(home.path, read_only=True) as client:
        events = client.get(run_id)["events"]
    deleted = [e for e in events if e["type"] == "snapshot_kind_deleted"]
    assert len(deleted) >= 2, "retention deleted nothing: the test shows nothing"
    url = f"{server.base}/runs/{run_id}"
    browser.get(url)
    shown = browser.run(VISIBLE)
    assert shown.count("snapshot_kind_deleted") == 1  # one row for them all, collapsed
    assert len(shown) == len(events) - len(deleted) + 1
    label = browser.run("return document.querySelector('tr.event-group button').textContent")
    assert label == f"{len(deleted)} retention deletions"
    browser.run("document.querySelector('tr.event-group button').click()")
    assert browser.run(VISIBLE).count("snapshot_kind_deleted") == len(deleted) + 1
    # details as fields, not JSON
    fields = browser.run(
        "return Array.from(document.querySelectorAll('tr.event[data-type=snapshot_kind_deleted]"
        " td.details .field')).map(f => f.textContent)"
    )
    assert f"kind: {deleted[-1]['kind']}" in fields and f"step: {deleted[-1]['step']}" in fields
    assert not any("{" in field for field in fields)
    # untick a type: its rows go, the others stay; "all" brings them back
    browser.run("document.querySelector('input[data-event-type=snapshot_committed]').click()")
    after = browser.run(VISIBLE)
    assert "snapshot_committed" not in after and "phase" in after
    browser.run("document.querySelector('button[data-events=none]').click()")
    assert browser.run(VISIBLE) == []
    browser.run("document.querySelector('button[data-events=all]').click()")
    assert len(browser.run(VISIBLE)) == len(events) + 1
    browser.run("document.querySelector('tr.event-group button').click()")  # collapsed again
    browser.run("document.getElementById('events').scrollIntoView()")
    assert browser.screenshot("ui-run-events.png", height=700).stat().st_size > 5000


ENDED = "return document.querySelector('dl.facts .phase.succeeded') !== null"
USAGE = """const row = document.querySelector('tr.usage');
    return row ? Array.from(row.cells).map(c => c.textContent) : null;"""


def test_a_running_attempt_shows_its_cpu_and_memory_and_no_gpu_here(more, browser):
    home, server = more
    hold = home.code / "busy.hold"
    hold.touch()
    file = home.workload("busy", "--steps", "40", "--save-every", "5", "--hold", str(hold))
    runner = home.start("run", file, "--key", "busy")
    try:
        run_id = _run_id(home, "busy")
        catalog = Catalog(str(home.path))
        wait_for(lambda: _committed(catalog, run_id), what="its first save")
        attempt = wait_for(lambda: _running(catalog, run_id), what="its program")
        browser.get(f"{server.base}/runs/{run_id}")  # the program holds after its first save
        cells = browser.wait(USAGE, what="the resource use of the running attempt")
        stage, number, pid, processes, cpu, memory, gpus = cells
        assert (stage, number, pid) == ("main", "1", str(attempt["pid"]))
        assert int(processes) >= 1
        assert cpu.endswith(" s") and "% of a core over " in cpu
        assert memory.endswith("MiB")  # an interpreter's resident memory
        # this machine has no GPU: the column says so, and nothing failed for it
        assert gpus == "none seen" if shutil.which("nvidia-smi") is None else "GPU 0 " in gpus
        screenshot(f"{server.base}/runs/{run_id}", "ui-run-live.png", height=700)
        # what the reader unticked stays unticked while the page refreshes itself to the end
        browser.run("document.querySelector('input[data-event-type=phase]').click()")
        hold.unlink()
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, err[-2000:]
        browser.wait(ENDED, what="the open page showing the run SUCCEEDED")
        assert browser.run("return document.querySelector('table.usage') === null")
        assert "phase" not in browser.run(VISIBLE)
        assert not browser.run(
            "return document.querySelector('input[data-event-type=phase]').checked"
        )
        page = dom(f"{server.base}/runs/{run_id}")
        assert page.find("table", "usage") == []  # nothing runs: no use to show
    finally:
        hold.unlink(missing_ok=True)
        if runner.poll() is None:  # a failed test: its runner and program go with their group
            os.killpg(runner.pid, signal.SIGKILL)
            runner.communicate()
