"""The page's log view shows a program's progress bars as a terminal would leave them (each
bar's last frame, no escape sequences), and its raw link downloads every byte as written.

A home of this module's, with one finished run of ``tests/runner/programs/progress_bars.py``,
so the session's catalog of finished runs (conftest.py) stays as the other page tests expect it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import dom

from conftest import Home, UiProcess, _accepting
from polling import wait_for

pytestmark = pytest.mark.slow  # a real run, a real server, a browser

PROGRAM = Path(__file__).parents[1] / "runner" / "programs" / "progress_bars.py"


def _program():
    spec = importlib.util.spec_from_file_location("progress_bars", PROGRAM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BARS = _program()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, UiProcess]]:
    root = tmp_path_factory.mktemp("ui-logs")
    home = Home(root / "home", root / "code", {})
    home.code.mkdir(parents=True)
    gate = root / "gate"
    gate.touch()  # the program ends once it has drawn its bars
    command = [sys.executable, str(PROGRAM), str(gate)]
    (home.code / "bars.toml").write_text(f'name = "bars"\ncommand = {json.dumps(command)}\n')
    ran = home.nodus("run", "bars.toml", "--key", "bars", "--json")
    assert ran.returncode == 0, ran.stderr
    server = UiProcess(home.path)
    wait_for(lambda: _accepting(server.base), what="the ui accepting connections")
    yield json.loads(ran.stdout)["id"], server
    server.stop()


def test_the_log_view_shows_each_bar_s_last_frame_and_links_the_raw_bytes(served):
    run_id, ui = served
    page = dom(f"{ui.base}/runs/{run_id}")
    (log,) = page.find("pre", "log")
    assert page.text(log).splitlines() == [*BARS.SHOWN, "done"]
    (link,) = page.find("a", rel="raw")
    assert "raw output" in page.text(link)
    with urllib.request.urlopen(urllib.parse.urljoin(ui.base + "/", link[1]["href"])) as answer:
        assert answer.read() == (BARS.RAW + "done\n").encode()
        assert answer.headers["Content-Disposition"] == (
            f'attachment; filename="{run_id}-main-attempt1.log"'
        )
    query = urllib.parse.urlencode({"run": run_id, "stage": "main", "attempt": 1})
    with urllib.request.urlopen(f"{ui.base}/api/output?{query}") as answer:
        assert json.loads(answer.read())["lines"] == [*BARS.SHOWN, "done"]
