"""Fixtures for the managed methods: each example run once, uninterrupted, per session, by its
README block as written (:mod:`readme_blocks`): the run ``nodus run workload.toml --key <name>``
that block makes is the one these tests inspect and compare against."""

from __future__ import annotations

import pytest
from methods_helpers import Example

import readme_blocks


def _finished(tmp_path_factory, name: str) -> Example:
    """examples/<name>'s README block run in a copy (``<root>/examples/<name>``, its runs in
    ``<root>/.nodus-demo``, as the block exports), its run keyed ``<name>``."""
    root = tmp_path_factory.mktemp(name)
    page = readme_blocks.method_page(name)
    ((folder, block),) = [(f, b) for p, f, b in readme_blocks.blocks() if p == page]
    ran = readme_blocks.run(page, folder, block, root)
    return Example.made(ran.here.parent, name, home=root / ".nodus-demo")


@pytest.fixture(scope="session")
def sft_run(tmp_path_factory) -> Example:
    """examples/sft run to the end without interruption (key ``sft``)."""
    return _finished(tmp_path_factory, "sft")


@pytest.fixture(scope="session")
def dpo_run(tmp_path_factory) -> Example:
    """examples/dpo run to the end without interruption (key ``dpo``)."""
    return _finished(tmp_path_factory, "dpo")


@pytest.fixture(scope="session")
def grpo_run(tmp_path_factory) -> Example:
    """examples/grpo run to the end without interruption (key ``grpo``)."""
    return _finished(tmp_path_factory, "grpo")
