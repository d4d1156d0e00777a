"""Every page of ``nodus ui`` in headless Chromium, against real runs (tests/ui/conftest.py):
what a person sees (texts, rows, a chart's points), a screenshot of each (docs/images/ui-*.png
with ``NODUS_UI_SCREENSHOTS=docs/images``), and program-written text shown as text."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request

import pytest
from browser import dom, screenshot
from programs.curve_counter import HTML_LINE

from conftest import Home, UiProcess, _committed, _run_id
from nodus.client import Client
from nodus.runner.catalog.core import Catalog
from polling import wait_for

pytestmark = [
    pytest.mark.slow,  # real runs through the real runner, then a browser
    pytest.mark.xdist_group("ui_runs_home"),  # one worker makes the session's `runs_home`
]

HEADER = (
    "run",
    "name",
    "phase",
    "key",
    "started",
    "duration",
    "stages",
    "attempts",
    "recoveries",
    "newest snapshot",
    "loss: newest",
    "loss: best",
    "stored",
)
MODEL_HEADER = (
    "name",
    "version",
    "aliases",
    "origin",
    "run",
    "snapshot",
    "step",
    "epoch",
    "metrics",
    "size",
    "registered",
)


def test_the_runs_page_lists_every_run_newest_first_and_filters(runs_home, ui):
    page = dom(ui.base + "/")
    rows = page.find("tr", "run")
    ids = [page.cells(row)[0] for row in rows]
    listed = json.loads(runs_home.nodus("runs", "list", "--json").stdout)
    assert ids == [run["id"] for run in listed]  # the page and --json agree, in order
    phases = {row[1]["data-phase"] for row in rows}
    assert phases == {"SUCCEEDED", "PAUSED", "FAILED"}
    assert "runs 1–4 of 4" in page.text()
    recovered = dict(zip(HEADER, page.cells(rows[ids.index(runs_home.runs["recovered"])])))
    assert (recovered["attempts"], recovered["recoveries"]) == ("2", "1")
    assert recovered["newest snapshot"].startswith("step 40")
    assert recovered["stored"].endswith("KiB") and recovered["key"] == "recovered"
    assert page.find("div", id="live")[0][1]["data-live"]  # it keeps itself up to date
    screenshot(ui.base + "/", "ui-runs.png", height=420)

    failed = dom(ui.base + "/?phase=FAILED")
    assert [failed.cells(r)[0] for r in failed.find("tr", "run")] == [runs_home.runs["failed"]]
    named = dom(ui.base + "/?name=PAUS")
    assert [named.cells(r)[0] for r in named.find("tr", "run")] == [runs_home.runs["paused"]]


def test_a_recovered_run_shows_its_attempts_snapshots_events_and_output_as_text(runs_home, ui):
    run_id = runs_home.runs["recovered"]
    url = f"{ui.base}/runs/{run_id}"
    page = dom(url)
    text = page.text()
    assert "killed by SIGKILL" in text  # the interruption in words
    attempts = page.find("tr", "attempt")
    assert len(attempts) == 2
    first, second = page.cells(attempts[0]), page.cells(attempts[1])
    assert first[2] == "lost" and second[2] == "succeeded"
    assert second[4].startswith("step ")  # the step it restored
    assert len(page.find("rect", "attempt")) == 2  # the timeline
    with Client(runs_home.path, read_only=True) as client:
        snapshots = client.snapshots(run_id)
        events = client.get(run_id)["events"]
    # steps 5, 10 and 15 before the kill, at least the last after the recovery: a save not yet
    # taken when the program exits gives way to the newest (docs/recovery.md, the exit capture)
    assert len(page.find("tr", "snapshot")) == len(snapshots) >= 4
    assert len(page.find("tr", "event")) == len(events)
    # the program's output: its HTML line is text, no element came from it
    logs = page.find("pre", "log")
    assert len(logs) == 2 and all(HTML_LINE in page.text(log) for log in logs)
    assert not page.find("b") and not page.find("i")
    assert [page.text(t) for t in page.find("title") if "pwned" in page.text(t)] == []
    assert "branched" in text  # its branch, linked
    screenshot(url, "ui-run.png", height=1000)


def test_a_paused_and_a_failed_run_say_so(runs_home, ui):
    paused = dom(f"{ui.base}/runs/{runs_home.runs['paused']}")
    assert "--checkpoint latest: paused" in paused.text()
    failed = dom(f"{ui.base}/runs/{runs_home.runs['failed']}")
    (said,) = failed.find("section", "failures")
    assert "exited with status 1" in failed.text(said)
    assert "loss is NaN <as asked>" in failed.text()  # its output, < and > as text


def test_metric_curves_have_a_point_per_logged_step_and_mark_the_recovery(runs_home, ui):
    run_id = runs_home.runs["recovered"]
    with Client(runs_home.path, read_only=True) as client:
        (stage,) = client.metrics(run_id)
    assert list(stage["curves"])[:2] == ["loss", "learning_rate"]
    url = f"{ui.base}/runs/{run_id}/metrics"
    page = dom(url)
    (loss,) = page.find("figure", "chart", data_metric="loss")
    assert len(page.inside(loss, "circle", "pt")) == len(stage["curves"]["loss"]) == 40
    assert len(page.inside(loss, "polyline")) == 2  # one per attempt
    assert len(page.inside(loss, "line", "recovery")) == 1
    assert len(page.inside(loss, "line", "snapshot")) == len(stage["snapshots"])
    screenshot(url, "ui-metrics.png", height=780)


def test_two_runs_overlaid(runs_home, ui):
    url = f"{ui.base}/runs/{runs_home.runs['recovered']}/metrics?with={runs_home.runs['branched']}"
    page = dom(url)
    (loss,) = page.find("figure", "chart", data_metric="loss")
    labels = [e[1]["data-label"] for e in page.inside(loss, "polyline")]
    assert any(runs_home.runs["branched"] in label for label in labels)
    assert any(runs_home.runs["recovered"] in label for label in labels)
    screenshot(url, "ui-overlay.png", height=780)


def test_the_lineage_tree_puts_the_branch_under_its_parent(runs_home, ui):
    page = dom(ui.base + "/lineage")
    nodes = page.find("li", "node")
    assert [(n[1]["data-depth"], page.text(page.inside(n, "a")[0])) for n in nodes] == [
        ("0", runs_home.runs["recovered"]),
        ("1", runs_home.runs["branched"]),
    ]
    assert "from step 20" in page.text(nodes[1])
    screenshot(ui.base + "/lineage", "ui-lineage.png", height=300)


def test_the_model_registry_lists_versions_aliases_and_origin(runs_home, ui):
    page = dom(ui.base + "/models")
    rows = [dict(zip(MODEL_HEADER, page.cells(row))) for row in page.find("tr", "model")]
    assert sorted(row["name"] for row in rows) == ["branched", "recovered"]
    recovered = next(row for row in rows if row["name"] == "recovered")
    assert recovered["aliases"].startswith("prod") and recovered["version"] == "1"
    assert all(row["origin"] == "run" for row in rows)  # registered as its run's model
    screenshot(ui.base + "/models", "ui-models.png", height=300)


def test_the_output_endpoint_hands_out_whole_lines_from_an_offset(runs_home, ui):
    run_id = runs_home.runs["failed"]
    query = f"run={run_id}&stage=main&attempt=1&offset=0"
    with urllib.request.urlopen(f"{ui.base}/api/output?{query}") as answer:
        first = json.loads(answer.read())
    assert first["lines"][1] == HTML_LINE and first["running"] is False
    query = f"run={run_id}&stage=main&attempt=1&offset={first['next_offset']}"
    with urllib.request.urlopen(f"{ui.base}/api/output?{query}") as answer:
        assert json.loads(answer.read())["lines"] == []


def test_the_output_endpoint_refuses_an_offset_past_any_file_in_a_line(runs_home, ui):
    run_id = runs_home.runs["failed"]
    query = f"run={run_id}&stage=main&attempt=1&offset={10**30}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{ui.base}/api/output?{query}")
    assert refused.value.code == 400
    assert (
        "offset 1000000000000000000000000000000: give a whole number"
        in refused.value.read().decode()
    )


def test_a_run_whose_runner_died_is_shown_as_one_with_what_continues_it(tmp_path):
    """A runner SIGKILLed mid-training leaves the run RUNNING in the catalog: the runs page and
    the run's page say its runner is gone and name the command that continues it."""
    home = Home(tmp_path / "home", tmp_path / "code", {})
    home.code.mkdir()
    file = home.workload("orphan", "--steps", "4000", "--save-every", "5", "--sleep", "0.05")
    runner = home.start("run", file, "--key", "orphan")
    run_id = _run_id(home, "orphan")
    wait_for(lambda: _committed(Catalog(str(home.path)), run_id), what="a snapshot")
    os.kill(runner.pid, signal.SIGKILL)
    runner.communicate(timeout=60)
    server = UiProcess(home.path)
    try:
        listed = dom(f"{server.base}/")
        (row,) = listed.find("tr", "run")
        assert "RUNNING" in listed.text(row) and "runner gone" in listed.text(row)
        page = dom(f"{server.base}/runs/{run_id}")
        assert "runner gone (pid " in page.text()
        assert "`nodus run FILE --key orphan` continues it" in page.text()
    finally:
        server.stop()
