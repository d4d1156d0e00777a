"""The charts and the lists that compare, in headless Chromium driven through WebDriver, on the
real runs of tests/ui/conftest.py: what a person sees when the page fills a wide window, when
the mouse rests on a chart, when a scale or a smoothing is chosen, when the CSV is downloaded,
when a column heading is clicked, and the one click from the lineage to a run over its parent."""

from __future__ import annotations

import base64
import csv
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from test_ui_live import started
from webdriver import Browser

from conftest import Home, UiProcess, _committed
from nodus.client import Client
from nodus.runner.catalog.core import Catalog
from polling import wait_for

pytestmark = pytest.mark.slow  # real runs, then a browser

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # W3C WebDriver's key of an element reference


@pytest.fixture(scope="module")
def browser():
    with Browser() as opened:
        opened._call(
            "POST", f"/session/{opened.session}/window/rect", {"width": 1400, "height": 1000}
        )
        yield opened


def element(browser: Browser, css: str) -> dict:
    found = browser._call(
        "POST", f"/session/{browser.session}/element", {"using": "css selector", "value": css}
    )
    return {ELEMENT: found[ELEMENT]}


def click(browser: Browser, css: str) -> None:
    ref = element(browser, css)[ELEMENT]
    browser._call("POST", f"/session/{browser.session}/element/{ref}/click", {})


def move_to(browser: Browser, css: str, x: int, y: int) -> None:
    """The mouse moved to (x, y) from the centre of the element ``css`` names: real input
    events, as a person's mouse makes them."""
    move = {"type": "pointerMove", "duration": 0, "origin": element(browser, css), "x": x, "y": y}
    source = {"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}}
    browser._call(
        "POST", f"/session/{browser.session}/actions", {"actions": [{**source, "actions": [move]}]}
    )


def keep_screenshot(browser: Browser, name: str) -> None:
    """The window as a PNG, kept as browser.screenshot keeps its own (``NODUS_UI_SCREENSHOTS``)."""
    data = base64.b64decode(browser._call("GET", f"/session/{browser.session}/screenshot"))
    path = Path(tempfile.gettempdir()) / "nodus-ui-screenshots" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    assert path.stat().st_size > 5000
    keep = os.environ.get("NODUS_UI_SCREENSHOTS")
    if keep:
        shutil.copyfile(path, Path(keep) / name)


def texts(browser: Browser, css: str) -> list[str]:
    return browser.run(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", css
    )


def test_the_charts_fill_a_wide_window_and_label_their_axes(runs_home, ui, browser):
    browser.get(f"{ui.base}/runs/{runs_home.runs['recovered']}/metrics")
    sizes = browser.run(
        """const main = document.querySelector('main'), pad = getComputedStyle(main);
        const inner = main.clientWidth - parseFloat(pad.paddingLeft) - parseFloat(pad.paddingRight);
        const figures = [...document.querySelectorAll('figure.chart')];
        const row = figures.filter(f => f.offsetTop === figures[0].offsetTop);
        return {inner, row: row.reduce((sum, f) => sum + f.getBoundingClientRect().width, 0),
                columns: row.length,
                svg: figures[0].querySelector('svg').getBoundingClientRect().width,
                figure: figures[0].getBoundingClientRect().width};"""
    )
    assert sizes["columns"] == 2  # side by side in a 1,400 px window, not one narrow column
    assert sizes["row"] > 0.9 * sizes["inner"]  # together they fill the page's width
    assert sizes["svg"] == pytest.approx(sizes["figure"], rel=0.01)  # each fills its column
    assert "step" in texts(browser, 'figure[data-metric="loss"] text.label.x')
    assert texts(browser, 'figure[data-metric="loss"] text.label.y') == ["loss"]


def test_resting_the_mouse_on_a_chart_shows_the_values_there(runs_home, ui, browser):
    browser.get(f"{ui.base}/runs/{runs_home.runs['recovered']}/metrics")
    assert browser.run("return document.querySelector('figure.chart div.hover').hidden")
    move_to(browser, 'figure[data-metric="loss"] svg', 0, 0)
    said = browser.wait(
        """const box = document.querySelector('figure[data-metric="loss"] div.hover');
        return !box.hidden && box.textContent;""",
        what="the values under the mouse",
    )
    at, *values = said.split("\n")
    assert at.startswith("step ")
    assert values and all(v.startswith("main attempt") and ": " in v for v in values)
    keep_screenshot(browser, "ui-metrics-hover.png")
    move_to(browser, "h1", 0, 0)  # the mouse leaves: the values go
    browser.wait(
        "return document.querySelector('figure[data-metric=\"loss\"] div.hover').hidden",
        what="the values hidden",
    )


def test_choosing_a_log_scale_changes_the_ticks(runs_home, ui, browser):
    browser.get(f"{ui.base}/runs/{runs_home.runs['recovered']}/metrics")
    tick = 'figure[data-metric="learning_rate"] text.tick.y'
    linear = texts(browser, tick)
    click(browser, 'select[name="y"] option[value="log"]')  # applied at once, no button
    browser.wait("return location.search.includes('y=log')", what="the page with y=log")
    logged = browser.wait(
        "return document.querySelector('svg[data-log]') && "
        "[...document.querySelectorAll(arguments[0])].map(e => e.textContent)",
        tick,
        what="the log scale's ticks",
    )
    assert logged != linear
    assert texts(browser, 'figure[data-metric="loss"] text.label.y') == ["loss (log scale)"]
    keep_screenshot(browser, "ui-metrics-log.png")


def test_smoothing_draws_the_smoothed_line_over_the_faint_raw_one(runs_home, ui, browser):
    browser.get(f"{ui.base}/runs/{runs_home.runs['recovered']}/metrics?smooth=0.9")
    counts = browser.run(
        """const f = document.querySelector('figure[data-metric="loss"]');
        return [f.querySelectorAll('polyline.raw').length,
                f.querySelectorAll('polyline:not(.raw)').length,
                f.querySelector('circle.pt').dataset.value];"""
    )
    assert counts[0] == counts[1] == 2  # per attempt, the raw line and the smoothed one
    assert "(raw " in counts[2]  # hover says both
    assert browser.run("return document.querySelector('select[name=smooth]').value") == "0.9"


def test_a_time_axis_places_the_points_in_seconds_since_the_start(runs_home, ui, browser):
    browser.get(f"{ui.base}/runs/{runs_home.runs['recovered']}/metrics?x=time")
    label = texts(browser, 'figure[data-metric="loss"] text.label.x')
    assert label[0].startswith("time since the run started")
    ticks = texts(browser, 'figure[data-metric="loss"] text.tick.x')
    assert ticks and all(t.endswith((" s", " min", " h")) for t in ticks)
    at = browser.run("return document.querySelector('circle.pt').dataset.at")
    assert at.endswith((" s", " min", " h"))


def test_the_csv_download_holds_every_series(runs_home, ui, browser):
    run_id = runs_home.runs["recovered"]
    browser.get(f"{ui.base}/runs/{run_id}/metrics")
    text = browser.run(
        """const a = document.querySelector('a.csv[download]');
        return fetch(a.href).then(r => r.text());"""
    )
    rows = list(csv.DictReader(io.StringIO(text)))
    with Client(runs_home.path, read_only=True) as client:
        (stage,) = client.metrics(run_id)
    assert {row["metric"] for row in rows} == set(stage["curves"])
    for name, points in stage["curves"].items():
        mine = [(int(r["step"]), float(r["value"])) for r in rows if r["metric"] == name]
        assert sorted(mine) == sorted((s, v) for s, v in points)
    assert {row["attempt"] for row in rows} == {"1", "2"}  # recovered: two attempts


def test_a_click_on_a_heading_sorts_the_runs(runs_home, ui, browser):
    browser.get(ui.base + "/")
    column = (
        "return [...document.querySelectorAll('tr.run')]"
        ".map(r => r.cells[arguments[0]].textContent)"
    )
    headings = texts(browser, "table.runs th")
    best = headings.index("loss: best")
    click(browser, f"table.runs th:nth-child({best + 1})")
    values = browser.run(column, best)
    numbers = [float(v.split(" (")[0]) for v in values if v != "–"]
    assert numbers == sorted(numbers) and len(numbers) >= 3  # lowest loss first
    assert values[len(numbers) :] == ["–"] * (len(values) - len(numbers))  # none: last
    click(browser, f"table.runs th:nth-child({best + 1})")  # again: the other way
    again = [float(v.split(" (")[0]) for v in browser.run(column, best) if v != "–"]
    assert again == sorted(numbers, reverse=True)
    name = headings.index("name")
    click(browser, f"table.runs th:nth-child({name + 1})")
    names = browser.run(column, name)
    assert names == sorted(names)
    browser.run("document.querySelector('table.runs').dataset.old = '1'")
    browser.wait(  # the table refreshed itself (every 2 s): the order is kept
        "const t = document.querySelector('table.runs'); return t && !t.dataset.old",
        what="the runs table refreshed",
    )
    assert browser.run(column, name) == names
    assert (
        browser.run(
            f"return document.querySelector('table.runs th:nth-child({name + 1})')"
            ".getAttribute('aria-sort')"
        )
        == "ascending"
    )
    started = browser.run(column, headings.index("started"))
    assert all(s.endswith(" UTC") for s in started)
    keep_screenshot(browser, "ui-runs-sorted.png")


def test_one_click_from_the_lineage_shows_a_run_over_its_parent(runs_home, ui, browser):
    browser.get(ui.base + "/lineage")
    click(browser, "a.compare")
    browser.wait("return location.pathname.endsWith('/metrics')", what="the overlay")
    labels = browser.run(
        """return [...document.querySelectorAll('figure[data-metric="loss"] polyline')]
        .map(p => p.dataset.label);"""
    )
    assert any(label.startswith(runs_home.runs["branched"]) for label in labels)
    assert any(label.startswith(runs_home.runs["recovered"]) for label in labels)
    assert len(texts(browser, "a.csv")) == 2  # each run's series to download


def test_each_model_version_shows_its_metrics_and_links_its_snapshot(runs_home, ui, browser):
    browser.get(ui.base + "/models")
    rows = browser.run(
        """return [...document.querySelectorAll('tr.model')].map(r => ({
            name: r.cells[0].textContent, metrics: r.cells[8].textContent,
            snapshot: r.cells[5].textContent, href: r.querySelector('a.snapshot').href}));"""
    )
    recovered = next(row for row in rows if row["name"] == "recovered")
    assert recovered["metrics"].startswith("loss ")
    assert (
        f"/runs/{runs_home.runs['recovered']}#snapshot-{recovered['snapshot']}"
        in (recovered["href"])
    )
    browser.get(recovered["href"])  # the run's page, at its snapshot's row
    assert recovered["snapshot"] in browser.run("return document.body.textContent")
    target = browser.run("return document.querySelector(':target')?.className || null")
    assert target == "snapshot"  # the link names that row, not just the page


@pytest.fixture(scope="module")
def going(tmp_path_factory):
    """A home of its own for a run that goes on while its page is open, and its ``nodus ui``."""
    root = tmp_path_factory.mktemp("ui-charts-live")
    home = Home(root / "home", root / "code", {})
    home.code.mkdir(parents=True)
    server = UiProcess(home.path)
    yield home, server
    server.stop()


def test_a_running_runs_refresh_keeps_what_the_reader_types_in_the_controls(going, browser):
    home, server = going
    with started(home, "typing", steps=20) as (run_id, _hold):
        catalog = Catalog(str(home.path))
        wait_for(lambda: _committed(catalog, run_id), what="its first save")
        browser.get(f"{server.base}/runs/{run_id}/metrics")  # held after its save: RUNNING
        ref = element(browser, 'input[name="with"]')[ELEMENT]
        browser._call("POST", f"/session/{browser.session}/element/{ref}/value", {"text": "run_"})
        browser.run("document.querySelector('div.charts').dataset.old = '1'")
        browser.wait(
            "const c = document.querySelector('div.charts'); return c && !c.dataset.old",
            what="the charts refreshed while the run goes on",
        )
        kept = browser.run(
            "const i = document.querySelector('input[name=with]');"
            "return [i.value, document.activeElement === i];"
        )
        assert kept == ["run_", True]  # typing goes on where it was
