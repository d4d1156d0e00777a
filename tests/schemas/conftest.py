"""Fixtures for the workload file tests: real files in a temporary folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from nodus.errors import WorkloadError
from nodus.schemas.loader import resolve_file
from nodus.schemas.resolved import ResolvedWorkload


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str], Path]:
    """Write a workload file (dedented) into a fresh folder; returns its path."""

    def _write(text: str, name: str = "workload.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return _write


@pytest.fixture
def resolved(write) -> Callable[[str], ResolvedWorkload]:
    """Resolve workload text; the test fails with the problems if it is refused."""

    def _resolved(text: str) -> ResolvedWorkload:
        return resolve_file(write(text))

    return _resolved


@pytest.fixture
def refused(write) -> Callable[[str], list[str]]:
    """The problem lines of workload text that must be refused (without the file name)."""

    def _refused(text: str) -> list[str]:
        path = write(text)
        with pytest.raises(WorkloadError) as caught:
            resolve_file(path)
        assert caught.value.exit_status == 2
        return [problem.render() for problem in caught.value.problems]

    return _refused
