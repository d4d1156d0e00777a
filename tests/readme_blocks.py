"""The command blocks a newcomer pastes, found and run as written.

A block marked ``<!-- runnable in DIR -->`` (README.md, examples/*/README.md, docs/*.md) is a
bash block meant to be pasted line by line in DIR after ``make demo``. :func:`run` runs one in a
copy of DIR at the same depth under a test's folder (so ``../../.venv`` and ``../../.nodus-demo``
resolve inside it, the venv linked to this interpreter's), under ``set -euo pipefail``: a line
that fails fails the test, naming it.

Most blocks run in ``tests/test_readme_blocks.py``. The managed methods' examples' blocks
(:data:`METHOD_EXAMPLES`) train the example as written, which is the uninterrupted run the
tests of tests/methods compare against: their session fixtures (tests/methods/conftest.py) run
the block, once, and use its run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"<!-- runnable in (\S+) -->\n```bash\n(.*?)```", re.S)
PAGES = [
    REPO / "README.md",
    *sorted(REPO.glob("examples/*/README.md")),
    *sorted(REPO.glob("docs/*.md")),
]
METHOD_EXAMPLES = ("sft", "dpo", "grpo")
"""The examples whose README block (``examples/<name>/README.md``) tests/methods/conftest.py
runs."""


def blocks() -> list[tuple[str, str, str]]:
    """(page, folder, block) of every runnable block."""
    found = []
    for page in PAGES:
        for folder, block in MARKED.findall(page.read_text()):
            found.append((str(page.relative_to(REPO)), folder, block))
    return found


def method_page(name: str) -> str:
    return f"examples/{name}/README.md"


@dataclass(frozen=True)
class Ran:
    """A block that ran to its end: the copy of its folder, its environment, what it traced."""

    here: Path
    env: dict[str, str]
    stderr: str


def run(page: str, folder: str, block: str, root: Path) -> Ran:
    """Run ``block`` of ``page`` in a copy of ``folder`` under ``root``; fail naming the line
    that failed."""
    here = root / folder
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
    return Ran(here, env, proc.stderr)
