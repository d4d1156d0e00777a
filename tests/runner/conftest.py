"""Fixtures for the runner tests; the helpers themselves live in runner_helpers.py.

A test that takes the ``project`` fixture drives real ``nodus`` processes for seconds: it is
outside the quick tier (marked ``slow`` here, so no runner test file has to say it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runner_helpers import Project

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if "project" in getattr(item, "fixturenames", ()) and HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def project(tmp_path) -> Project:
    """A code folder with a workload file and a private $NODUS_HOME next to it."""
    root = tmp_path / "project"
    root.mkdir()
    return Project(root, tmp_path / "home")


@pytest.fixture
def setup(tmp_path):
    """A capture loop's surroundings: a catalog with one run, a local store, a working copy."""
    from nodus.runner.catalog.core import Catalog
    from nodus.runner.workspace.layout import Workspace
    from nodus.store import open_store

    catalog = Catalog(str(tmp_path / "home"))
    run_id = catalog.create_run(
        name="w", workload={}, store="", key=None, lock_name="l", stage_names=["main"]
    )
    store = open_store("file://" + str(tmp_path / "store"))
    ws = Workspace(str(tmp_path / "attempt"))
    ws.make_private_folders()
    return catalog, run_id, store, ws


@pytest.fixture
def no_settling(monkeypatch):
    """Folders and selections settle at once: a capture loop's poll takes what it sees."""
    monkeypatch.setenv("NODUS_SETTLE_S", "0")
