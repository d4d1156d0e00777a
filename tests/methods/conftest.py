"""Fixtures for the managed methods: each example run once, uninterrupted, per session."""

from __future__ import annotations

import pytest
from methods_helpers import Example


def _finished(tmp_path_factory, name: str) -> Example:
    example = Example(tmp_path_factory.mktemp(name), name)
    proc = example.nodus("run", str(example.file), "--key", "whole", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return example


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory) -> Example:
    """examples/sft run to the end without interruption (key ``whole``)."""
    return _finished(tmp_path_factory, "sft")


@pytest.fixture(scope="session")
def dpo_run(tmp_path_factory) -> Example:
    """examples/dpo run to the end without interruption (key ``whole``)."""
    return _finished(tmp_path_factory, "dpo")


@pytest.fixture(scope="session")
def grpo_run(tmp_path_factory) -> Example:
    """examples/grpo run to the end without interruption (key ``whole``)."""
    return _finished(tmp_path_factory, "grpo")
