"""Headless Chromium driven through ChromeDriver's W3C WebDriver HTTP API, with the standard
library alone (urllib + json): for the tests that watch a page change while it stays open,
which a one-shot ``--dump-dom`` (:mod:`browser`) cannot show.

:class:`Browser` starts ``chromedriver`` on a free port, opens one session (its own Chromium
profile in a temporary folder), navigates, runs scripts that read the DOM, and on close ends
the session, then ChromeDriver and every process it started (its process group), so nothing
outlives the test. Missing ChromeDriver or Chromium skips the test on a developer's machine and
fails it where ``CI`` is set (``make test`` installs both: the Makefile's ``chromium`` target).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser import FLAGS

CHROMIUM = "/usr/bin/chromium"
START_S = 30  # ChromeDriver answering, then Chromium started: seconds, on a loaded machine


def chromedriver() -> str:
    found = shutil.which("chromedriver")
    if found is None or not os.path.exists(CHROMIUM):
        words = "ChromeDriver and Chromium are not installed (apt-get install chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(words)
        pytest.skip(words)
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Browser:
    """One WebDriver session in headless Chromium; a context manager that ends it all."""

    def __init__(self) -> None:
        driver = chromedriver()
        self.profile = tempfile.mkdtemp(prefix="nodus-webdriver-")
        self.base = f"http://127.0.0.1:{free_port()}"
        # Its own process group: Chromium and its helpers are ended with it, whatever happens.
        self.proc = subprocess.Popen(
            [driver, f"--port={self.base.rsplit(':', 1)[1]}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.session = ""
        try:
            self._wait_ready()
            options = {"binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={self.profile}"]}
            capabilities = {"alwaysMatch": {"goog:chromeOptions": options}}
            self.session = self._call("POST", "/session", {"capabilities": capabilities})[
                "sessionId"
            ]
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, url: str) -> None:
        """Open ``url`` and wait for its load (WebDriver's navigate)."""
        self._call("POST", f"/session/{self.session}/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """The value of ``script`` (a function body: ``return …``) run in the page."""
        body = {"script": script, "args": list(args)}
        return self._call("POST", f"/session/{self.session}/execute/sync", body)

    def wait(self, script: str, *args: Any, what: str, timeout: float = 60) -> Any:
        """Poll ``script`` (with ``args``) until it returns something truthy; that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.run(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:.0f} s for {what}")
            time.sleep(0.25)

    def screenshot(self, name: str, width: int = 1280, height: int = 900) -> Path:
        """A PNG of the page as it stands now (scrolled, opened, filtered), kept as
        :func:`browser.screenshot` keeps one (``NODUS_UI_SCREENSHOTS``)."""
        window = {"width": width, "height": height}
        self._call("POST", f"/session/{self.session}/window/rect", window)
        data = base64.b64decode(self._call("GET", f"/session/{self.session}/screenshot"))
        folder = Path(tempfile.gettempdir()) / "nodus-ui-screenshots"
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_bytes(data)
        keep = os.environ.get("NODUS_UI_SCREENSHOTS")
        if keep:
            shutil.copyfile(path, Path(keep) / name)
        return path

    def close(self) -> None:
        """End the session (its Chromium), then ChromeDriver and anything left of its group."""
        if self.session:
            with contextlib.suppress(OSError, AssertionError):  # ended below regardless
                self._call("DELETE", f"/session/{self.session}", timeout=15)
            self.session = ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):  # a Chromium helper left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_S
        while True:
            try:
                if self._call("GET", "/status", timeout=2).get("ready"):
                    return
            except OSError:
                pass  # not listening yet
            if self.proc.poll() is not None:
                raise AssertionError(f"chromedriver exited with status {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise AssertionError(f"chromedriver did not answer in {START_S} s")
            time.sleep(0.1)

    def _call(self, method: str, path: str, body: dict | None = None, timeout: float = 60) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.loads(answer.read())["value"]
        except urllib.error.HTTPError as error:
            said = json.loads(error.read() or b"{}").get("value", {}).get("message", error)
            raise AssertionError(f"WebDriver {method} {path}: {said}") from None


def leftovers(profile: str) -> list[int]:
    """The pids of processes whose command line names ``profile`` (none, once closed)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if profile.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
