"""The command blocks a newcomer pastes, run as written (:mod:`readme_blocks`).

The managed methods' examples' blocks are run by the session fixtures of tests/methods (their
run is the uninterrupted run those tests compare against); every other block runs here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import readme_blocks

OUTPUT = re.compile(
    r"<!-- output of `nodus ([^`]+)` after the README walkthrough -->\n```\n(.*?)```", re.S
)
# What differs from one machine to the next: ids, and a few bytes (paths written into files)
SNAPSHOT_ID = re.compile(r"ckpt_[0-9a-f]{16}")
SIZE = re.compile(r"\d+(?:\.\d+)? (B|KiB|MiB|GiB)\b")
BLOCKS = readme_blocks.blocks()
IN_METHOD_RUNS = {readme_blocks.method_page(name) for name in readme_blocks.METHOD_EXAMPLES}
HERE = [(page, folder, block) for page, folder, block in BLOCKS if page not in IN_METHOD_RUNS]


def test_the_readme_and_every_example_readme_have_a_runnable_block():
    pages = {page for page, _, _ in BLOCKS}
    assert {"README.md", *IN_METHOD_RUNS} <= pages


@pytest.mark.slow
@pytest.mark.hf
@pytest.mark.parametrize(("page", "folder", "block"), HERE, ids=[f"{p}" for p, _, _ in HERE])
def test_a_runnable_block_runs_as_written(page, folder, block, tmp_path):
    ran = readme_blocks.run(page, folder, block, tmp_path)
    if page == "README.md":  # the walkthrough's interruption is seen, and its recovery
        assert "nodus: attempt 1 lost" in ran.stderr
        assert re.search(r"nodus: restoring step \d+ \(ckpt_\w+\) → attempt 2", ran.stderr)
        _check_sample_outputs(ran.here, ran.env)


def _check_sample_outputs(here: Path, env: dict[str, str]) -> None:
    """Each docs sample marked as the walkthrough's output is that output (ids and byte counts
    aside: its rows, steps, kinds, deleted kinds and metrics must match)."""
    home = here / ".." / ".." / ".nodus-demo"
    pages = readme_blocks.PAGES
    samples = [(page, *m) for page in pages for m in OUTPUT.findall(page.read_text())]
    assert samples, "docs/cli.md shows `nodus runs snapshots tour` from the walkthrough"
    for page, command, shown in samples:
        real = subprocess.run(
            [sys.executable, "-m", "nodus", "--home", str(home), *command.split()],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert real.returncode == 0, real.stderr
        masked = [_masked(text) for text in (shown, real.stdout)]
        assert masked[0] == masked[1], f"{page}: `nodus {command}` prints:\n{real.stdout}"


def _masked(text: str) -> list[str]:
    text = SIZE.sub(r"N \1", SNAPSHOT_ID.sub("ckpt_…", text))
    return [" ".join(line.split()) for line in text.splitlines()]
