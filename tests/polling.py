"""Waiting for something a real process will do: one poller for every test area."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

WAIT_S = 180.0  # generous: the CI machine is shared; a healthy wait ends in seconds


def wait_for(
    predicate,
    what: str = "condition",
    runner: subprocess.Popen | None = None,
    *,
    timeout: float = WAIT_S,
):
    """Poll until ``predicate()`` is truthy and return it; fail naming ``what``.

    With ``runner`` (a ``nodus run`` started with a ``log_path`` attribute), fail at once if it
    ended meanwhile, showing the end of its output: waiting on a dead run only hides why.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if runner is not None and runner.poll() is not None:
            output = Path(runner.log_path).read_text(errors="replace")[-3000:]
            raise AssertionError(
                f"nodus exited {runner.returncode} while waiting for {what}:\n{output}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)
