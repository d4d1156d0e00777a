"""The command blocks a newcomer pastes, run as written.

A block marked ``<!-- runnable in DIR -->`` (README.md, examples/*/README.md, docs/*.md) is a
bash block meant to be pasted line by line in DIR after ``make demo``. Each runs here in a copy
of DIR at the same depth (so ``../../.venv`` and ``../../.nodus-demo`` resolve inside the test's
folder, the venv linked to this interpreter's), under ``set -euo pipefail``: a line that fails
fails the test, naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUTPUT = re.compile(
    r"<!-- output of `nodus ([^`]+)` after the README walkthrough -->\n```\n(.*?)```", re.S
)
# What differs from one machine to the next: ids, and a few bytes (paths written into files)
SNAPSHOT_ID = re.compile(r"ckpt_[0-9a-f]{16}")
SIZE = re.compile(r"\d+(?:\.\d+)? (B|KiB|MiB|GiB)\b")
MARKED = re.compile(r"<!-- runnable in (\S+) -->\n```bash\n(.*?)```", re.S)
PAGES = [
    REPO / "README.md",
    *sorted(REPO.glob("examples/*/README.md")),
    *sorted(REPO.glob("docs/*.md")),
]


def _blocks() -> list[tuple[str, str, str]]:
    """(page, folder, block) of every runnable block."""
    found = []
    for page in PAGES:
        for folder, block in MARKED.findall(page.read_text()):
            found.append((str(page.relative_to(REPO)), folder, block))
    return found


BLOCKS = _blocks()


def test_the_readme_and_every_example_readme_have_a_runnable_block():
    pages = {page for page, _, _ in BLOCKS}
    assert {"README.md", *(f"examples/{n}/README.md" for n in ("sft", "dpo", "grpo"))} <= pages


@pytest.mark.slow
@pytest.mark.hf
@pytest.mark.parametrize(("page", "folder", "block"), BLOCKS, ids=[f"{p}" for p, _, _ in BLOCKS])
def test_a_runnable_block_runs_as_written(page, folder, block, tmp_path):
    here = tmp_path / folder
    shutil.copytree(REPO / folder, here, ignore=shutil.ignore_patterns(".nodus*", "__pycache__"))
    for shared in REPO.glob(f"{Path(folder).parent}/*.py"):  # examples/tinybase.py
        shutil.copy(shared, here.parent / shared.name)
    depth = len(Path(folder).parts)
    (here / ("../" * depth) / ".venv").symlink_to(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k not in ("NODUS_HOME", "NODUS_STORE")}
    proc = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nset -x\n{block}"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    traced = [line for line in proc.stderr.splitlines() if line.startswith("+ ")]
    assert proc.returncode == 0, (
        f"{page}: the block failed at `{traced[-1][2:] if traced else '?'}`:\n"
        + proc.stderr[-3000:]
    )
    if page == "README.md":  # the walkthrough's interruption is seen, and its recovery
        assert "nodus: attempt 1 lost" in proc.stderr
        assert re.search(r"nodus: restoring step \d+ \(ckpt_\w+\) → attempt 2", proc.stderr)
        _check_sample_outputs(here, env)


def _check_sample_outputs(here: Path, env: dict[str, str]) -> None:
    """Each docs sample marked as the walkthrough's output is that output (ids and byte counts
    aside: its rows, steps, kinds, deleted kinds and metrics must match)."""
    home = here / ".." / ".." / ".nodus-demo"
    samples = [(page, *m) for page in PAGES for m in OUTPUT.findall(page.read_text())]
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
