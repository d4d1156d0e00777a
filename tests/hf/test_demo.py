"""`make demo` on a fresh checkout, run as a newcomer runs it: the quick start killed once and
recovered, compared with an uninterrupted run, the snapshots retention kept, and the next steps,
with nothing printed that reads as an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.hf, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_make_demo_on_a_fresh_checkout_shows_a_recovery_that_ends_like_an_uninterrupted_run(
    tmp_path,
):
    """The demo runs in a clone of the committed tree (its runs in the clone's .nodus-demo, as
    `make demo` leaves them). The clone reuses this interpreter's environment (`VENV=…`, its
    stamp taken as made) rather than installing one; its own ``src`` is the nodus that runs,
    and the demo's `nodus` and `python` are that environment's."""
    checkout = tmp_path / "nodus"
    subprocess.run(["git", "clone", "-q", str(REPO), str(checkout)], check=True)
    venv = Path(sys.prefix)
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    for name in ("NODUS_HOME", "NODUS_STORE", "MAKEFLAGS", "MFLAGS"):
        env.pop(name, None)
    proc = subprocess.run(
        ["make", "demo", f"VENV={venv}", "-o", f"{venv}/.installed"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown, shown
    lines = [line for line in shown.splitlines() if line.startswith("nodus: ")]
    said = [line for line in lines if "committed (ckpt_" not in line]  # each snapshot: said too
    assert any(line.startswith("nodus: snapshot of step ") for line in lines)
    interrupted = next(i for i, line in enumerate(said) if "attempt 1 lost" in line)
    assert "killed by SIGKILL, which nodus did not send" in said[interrupted]
    assert said[interrupted + 1].startswith("nodus: restoring step ")
    assert said[interrupted + 1].endswith("→ attempt 2")
    assert "identical: the recovery lost and repeated nothing" in shown
    assert '"deleted": retention freed those kinds' in shown
    assert "Next steps" in shown
