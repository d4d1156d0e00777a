"""Headless Chromium (Debian's ``chromium`` package) for the page tests, without a Python
driver: ``--dump-dom`` gives the DOM once the page's scripts ran, ``--screenshot`` a PNG.

Missing Chromium skips a test on a developer's machine and fails it where ``CI`` is set
(``make test`` installs it: the Makefile's ``chromium`` target).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        words = "headless Chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(words)
        pytest.skip(words)
    return found


def _run(*args: str, timeout: float = 60) -> str:
    with tempfile.TemporaryDirectory(prefix="nodus-chromium-") as profile:
        proc = subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def dom(url: str, budget_ms: int = 3000) -> Dom:
    """The page's DOM after its scripts ran for ``budget_ms`` of virtual time."""
    return Dom(_run(f"--virtual-time-budget={budget_ms}", "--dump-dom", url))


def screenshot(url: str, name: str, height: int = 900) -> Path:
    """A 1280-wide PNG of the page, in the test's temporary folder, and in the folder
    ``NODUS_UI_SCREENSHOTS`` names (``docs/images`` refreshes the committed ones)."""
    folder = Path(tempfile.gettempdir()) / "nodus-ui-screenshots"
    folder.mkdir(exist_ok=True)
    path = folder / name
    _run(
        f"--screenshot={path}",
        f"--window-size=1280,{height}",
        "--virtual-time-budget=1500",
        url,
    )
    assert path.stat().st_size > 5000  # a page was drawn, not a blank
    keep = os.environ.get("NODUS_UI_SCREENSHOTS")
    if keep:
        shutil.copyfile(path, Path(keep) / name)
    return path


class Dom(HTMLParser):
    """The elements of a dumped DOM: ``(tag, attrs, text)`` with each element's own text
    and its descendants' (entities decoded: what a person reads)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source = text
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[tuple[str, dict[str, str], list[str]]] = []
        self._ends: dict[int, int] = {}
        self.feed(text)

    _VOID = frozenset({"meta", "link", "input", "br", "img", "hr"})

    def handle_starttag(self, tag, attrs):
        element = (tag, {k: v or "" for k, v in attrs}, [])
        self.elements.append(element)
        if tag not in self._VOID:
            self._open.append(element)

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_endtag(self, tag):
        for index in range(len(self._open) - 1, -1, -1):
            if self._open[index][0] == tag:
                for element in self._open[index:]:
                    self._ends[id(element)] = len(self.elements)
                del self._open[index:]
                break

    def inside(self, element: tuple, tag: str | None = None, cls: str | None = None) -> list:
        """The elements inside ``element`` (of ``tag``, with class ``cls``)."""
        start = next(i for i, e in enumerate(self.elements) if e is element)
        found = self.elements[start + 1 : self._ends.get(id(element), len(self.elements))]
        return [
            e
            for e in found
            if (tag is None or e[0] == tag)
            and (cls is None or cls in e[1].get("class", "").split())
        ]

    def cells(self, row: tuple) -> list[str]:
        """The texts of a table row's cells."""
        return [self.text(cell) for cell in self.inside(row, "td")]

    def handle_data(self, data):
        for element in self._open:
            element[2].append(data)

    def find(self, tag: str, cls: str | None = None, **attrs: str) -> list[tuple]:
        """Elements of ``tag`` having class ``cls`` and the ``attrs`` given."""
        return [
            e
            for e in self.elements
            if e[0] == tag
            and (cls is None or cls in e[1].get("class", "").split())
            and all(e[1].get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def text(self, element: tuple | None = None) -> str:
        """What a person reads in ``element`` (the body's text without one)."""
        if element is None:
            (body,) = self.find("body")
            element = body
        return "".join(element[2])
