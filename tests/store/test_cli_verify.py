"""`nodus store verify [--repair] [--json]` through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from nodus.store import SnapshotInfo, keys, open_store

from .trees import write_tree

# Outside the quick tier: the real `nodus` command line on real stores.
pytestmark = pytest.mark.slow


def run_nodus(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nodus", *args], capture_output=True, text=True, timeout=120
    )


def _store_with_two_snapshots(nodus_home, tmp_path):
    store = open_store(str(nodus_home / "store"))  # the default store of this $NODUS_HOME
    write_tree(tmp_path / "live", {"state/optimizer.pt": os.urandom(3000)})
    first = store.capture(
        str(tmp_path / "live"),
        ["state"],
        info=SnapshotInfo(run="r", stage="main", attempt=1, step=1),
    )
    write_tree(tmp_path / "live", {"state/optimizer.pt": os.urandom(3000)})
    second = store.capture(
        str(tmp_path / "live"),
        ["state"],
        info=SnapshotInfo(run="r", stage="main", attempt=1, step=2),
    )
    return store, first, second


def test_verify_reports_a_sound_store(nodus_home, tmp_path):
    _store_with_two_snapshots(nodus_home, tmp_path)
    proc = run_nodus("store", "verify", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["sound"], report["snapshots"], report["files"], report["blobs"]) == (
        True,
        2,
        2,
        2,
    )


def test_verify_finds_damage_and_repair_sets_it_aside(nodus_home, tmp_path):
    store, first, second = _store_with_two_snapshots(nodus_home, tmp_path)
    blob = store.storage.path(keys.blob_key(second.files[0].hash))
    with open(blob, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff")

    found = run_nodus("store", "verify")
    assert found.returncode == 1
    assert f"damaged {second.id}:" in found.stdout and "state/optimizer.pt" in found.stdout
    assert "--repair" in found.stdout

    repaired = run_nodus("store", "verify", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"set {second.id} aside" in repaired.stdout
    assert [m.id for m in open_store(store.url).list()] == [first.id]
    assert run_nodus("store", "verify").returncode == 0


def test_unusable_store_url_is_a_clear_refusal(nodus_home):
    proc = run_nodus("store", "verify", "--store", "not-a-url")
    assert proc.returncode == 2
    assert "store URL 'not-a-url'" in proc.stderr and "Traceback" not in proc.stderr
