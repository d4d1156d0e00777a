"""Fixtures for the snapshot commands: real runs made once per session with `nodus run`.

``hf_run`` is the quick-start Trainer program under ``hf-trainer-v1`` (14 steps, 12 per epoch,
saves at 6, 12 = the end of epoch 0, and 14 = the last update); ``counter_run`` is the shipped
directory-contract program killed once by SIGKILL, so its run has a recovery. Tests that change
holds or damage blobs work on a copy of the store (``store_copy``), never on the shared one.
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from snapshot_helpers import (
    QUICKSTART,
    Home,
    RunInfo,
    accepted_id,
    counter_workload,
    run_with_one_kill,
)


@pytest.fixture(scope="session")
def hf_run(tmp_path_factory) -> RunInfo:
    """The quick-start Trainer program run once under nodus, uninterrupted."""
    base = tmp_path_factory.mktemp("hf-run")
    project = base / "project"
    shutil.copytree(QUICKSTART, project)
    workload = (project / "workload.toml").read_text()
    workload = workload.replace(
        'command = ["python", "train.py"]', f"command = {json.dumps([sys.executable, 'train.py'])}"
    )
    # These tests are about listings, holds and downloads: retention keeps every save whole.
    workload = workload.replace("keep_recoverable = 1\n", "keep_recoverable = 10\n")
    assert "keep_recoverable = 10\n" in workload
    (project / "workload.toml").write_text(workload)
    home = Home(base / "home")
    proc = home.nodus("run", "workload.toml", "--key", "quick-hf", cwd=project, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return RunInfo(home, accepted_id(home, "quick-hf"), "quick-hf", project)


@pytest.fixture(scope="session")
def counter_run(tmp_path_factory) -> RunInfo:
    """The directory-contract counter, killed once and recovered automatically; SUCCEEDED."""
    base = tmp_path_factory.mktemp("counter-run")
    counter_workload(base / "project")
    info = run_with_one_kill(Home(base / "home"), base / "project", "counter-recovered")
    assert info.home.catalog().get_run(info.run_id).phase == "SUCCEEDED"
    return info


@pytest.fixture
def store_copy(hf_run, tmp_path) -> str:
    """A private copy of the hf run's store (URL), for tests that pin, release or damage."""
    target = tmp_path / "store-copy"
    shutil.copytree(hf_run.home.path / "store", target)
    return "file://" + str(target)
