"""SIGKILL a capturing process at random points; every listed snapshot must restore and verify."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodus.store import _direct, _io, open_store

from .crash_child import DIRECT_CHUNK_BYTES, DIRECT_MIN_BYTES, FILES, contents

CHILD = Path(__file__).with_name("crash_child.py")
ITERATIONS = 50


@pytest.mark.slow
def test_sigkill_during_capture_never_leaves_a_broken_committed_snapshot(tmp_path, monkeypatch):
    # Restores read the large files directly too, as the child wrote them.
    monkeypatch.setattr(_io, "STORE_DIRECT_MIN_BYTES", DIRECT_MIN_BYTES)
    monkeypatch.setattr(_direct, "STORE_DIRECT_CHUNK_BYTES", DIRECT_CHUNK_BYTES)
    store_url = "file://" + str(tmp_path / "store")
    live = tmp_path / "live"
    live.mkdir()
    rng = random.Random(20240607)
    checked: set[str] = set()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for iteration in range(ITERATIONS):
        child = subprocess.Popen(
            [sys.executable, str(CHILD), store_url, str(live), str(iteration * 1000)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout.readline() == b"ready\n"
        # One commit first, so every iteration has a snapshot to lose; then the kill lands
        # anywhere in the following captures: writing, copying, committing.
        assert child.stdout.readline().startswith(b"committed")
        time.sleep(rng.uniform(0.0, 0.1))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        checked |= _restore_new_snapshots(store_url, tmp_path / f"restore-{iteration}", checked)

    assert len(checked) >= ITERATIONS
    report = open_store(store_url).verify()
    assert report.sound, report.lines()
    assert report.snapshots == len(checked)


def _restore_new_snapshots(store_url: str, scratch: Path, seen: set[str]) -> set[str]:
    """Restore each snapshot not yet checked and compare it with the state that was saved."""
    store = open_store(store_url)  # a fresh process's view, as recovery would have
    new = set()
    for manifest in store.list(run="run_crash"):
        if manifest.id in seen:
            continue
        target = scratch / manifest.id
        store.restore(manifest.id, str(target))  # verifies every hash
        folder = target / "state" / f"checkpoint-{manifest.step}"
        assert sorted(os.listdir(target / "state")) == [f"checkpoint-{manifest.step}"]
        for name in FILES:
            assert (folder / name).read_bytes() == contents(name, manifest.step)
        new.add(manifest.id)
    return new
