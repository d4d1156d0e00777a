"""Pages that follow a run while it goes on, in a real browser kept open (:mod:`webdriver`):
a running run's output grows on its page, and the runs page shows a run end, with no reload
(a marker set on ``window`` survives) and the program's HTML still shown as text.

Each test starts its own run of ``programs/curve_counter.py`` in a home of this module's, so the
session's catalog of finished runs (conftest.py) stays as the other page tests expect it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from programs.curve_counter import HTML_LINE
from webdriver import Browser, leftovers

from conftest import Home, UiProcess, _committed, _run_id
from nodus.runner.catalog.core import Catalog
from polling import wait_for

pytestmark = pytest.mark.slow  # real runs, followed for seconds in a browser

SLOW = ("--save-every", "5", "--sleep", "0.25")  # a save (and its lines) every 1.25 s
LOG_TEXT = "Array.from(document.querySelectorAll('pre.log')).map(p => p.textContent).join('')"
# The log's text once ``arguments[1]`` was printed after ``arguments[0]``; else null.
LOG_AFTER = f"""
    const text = {LOG_TEXT};
    const rest = text.split(arguments[0])[1];
    return rest && rest.includes(arguments[1]) ? text : null;
"""
ROW = """
    const row = Array.from(document.querySelectorAll('tr.run'))
        .find(r => r.cells[0].textContent === arguments[0]);
"""
ROW_PHASE = ROW + "return row ? row.dataset.phase : null;"
ROW_IN = ROW + "return Boolean(row) && row.dataset.phase === arguments[1];"


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[Home, UiProcess]]:
    root = tmp_path_factory.mktemp("ui-live")
    home = Home(root / "home", root / "code", {})
    home.code.mkdir(parents=True)
    server = UiProcess(home.path)  # on an empty home: the runs below start after it
    yield home, server
    server.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with Browser() as driver:
        yield driver
    assert leftovers(driver.profile) == []  # no Chromium outlives the test


@contextmanager
def started(home: Home, key: str, steps: int) -> Iterator[tuple[str, Path]]:
    """A run of the curve counter under ``key``, going on; it must succeed by the end.

    Yields its id and a hold file: while it exists the program waits after each save, so a
    page opened on a loaded machine still finds the run going; the test removes it to go on."""
    hold = home.code / f"{key}.hold"
    hold.touch()
    workload = home.workload(key, "--steps", str(steps), *SLOW, "--hold", str(hold))
    runner = home.start("run", workload, "--key", key)
    try:
        yield _run_id(home, key), hold
        hold.unlink(missing_ok=True)
        _, err = runner.communicate(timeout=120)
        assert runner.returncode == 0, err[-2000:]
    finally:
        _end(runner)


def _end(runner: subprocess.Popen) -> None:
    """A runner still going when a test failed: asked to stop, then killed with its group."""
    if runner.poll() is not None:
        return
    runner.send_signal(signal.SIGTERM)
    try:
        runner.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.communicate()


def _steps(text: str) -> list[int]:
    return [int(step) for step in re.findall(r"curve: step (\d+),", text)]


def test_a_running_run_page_follows_its_output_live(live, browser):
    home, server = live
    with started(home, "follow", steps=40) as (run_id, hold):
        catalog = Catalog(str(home.path))
        wait_for(lambda: any(s >= 5 for s in _committed(catalog, run_id)), what="step 5 saved")
        browser.get(f"{server.base}/runs/{run_id}")  # the program holds after step 5
        assert browser.run("return document.querySelector('pre.log[data-follow]') !== null")
        browser.run("window.__kept = 1")
        target = max(_steps(browser.run("return " + LOG_TEXT)), default=0) + 10  # 2 saves on
        hold.unlink()  # what follows is printed while we watch
        after = f"curve: step {target},"
        text = browser.wait(
            LOG_AFTER, after, HTML_LINE, what=f"{after} and an HTML line after it, on the page"
        )
        assert browser.run("return window.__kept") == 1  # the same page: never reloaded
        assert _steps(text) == sorted(set(_steps(text)))  # each line once, in order
        # the HTML line is text: its characters are there, no element was made of it
        assert text.count(HTML_LINE) >= 3
        assert browser.run("return document.querySelectorAll('pre.log *').length") == 0
        assert browser.run("return document.querySelectorAll('main b, main script').length") == 0
        assert "pwned" not in browser.run("return document.title")


def test_the_runs_page_shows_a_run_end_without_a_reload(live, browser):
    home, server = live
    with started(home, "ending", steps=24) as (run_id, hold):
        catalog = Catalog(str(home.path))
        wait_for(lambda: _committed(catalog, run_id), what="its first save")
        browser.get(server.base + "/")  # the program holds after its first save
        assert browser.run(ROW_PHASE, run_id) == "RUNNING"
        browser.run("window.__kept = 1")
        hold.unlink()
        browser.wait(ROW_IN, run_id, "SUCCEEDED", what=f"{run_id} SUCCEEDED on the open page")
        assert browser.run("return window.__kept") == 1
