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
        assert "nodus: attempt 1 interrupted" in proc.stderr
        assert re.search(r"nodus: restoring step \d+ \(ckpt_\w+\) → attempt 2", proc.stderr)
