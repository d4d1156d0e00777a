"""Fixtures for the runner tests; the helpers themselves live in runner_helpers.py."""

from __future__ import annotations

import pytest
from runner_helpers import Project


@pytest.fixture
def project(tmp_path) -> Project:
    """A code folder with a workload file and a private $NODUS_HOME next to it."""
    root = tmp_path / "project"
    root.mkdir()
    return Project(root, tmp_path / "home")
