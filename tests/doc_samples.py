"""The sample outputs of docs/, checked against what the code really prints.

A sample block is marked ``<!-- sample NAME -->`` on the line above its fence. A test that makes
that output calls :func:`check` with it: each line of the sample must match a line of the real
output, in order. In a sample, ``…`` stands for any text, and ids and numbers for any id and
number (a sample's run ids, pids and steps are one run's); runs of spaces count as one, so a
table's column widths may differ. ``tests/test_docs_samples.py`` checks that every marked sample
is checked by some test.

A recipe's workload file is marked ``<!-- recipe NAME -->`` on the line above its ``toml``
fence; :func:`recipe` gives its text to the test that runs it as written
(``tests/runner/test_recipes.py``), and ``tests/test_docs_samples.py`` checks that every marked
recipe is run by some test.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARKER = re.compile(r"<!-- sample ([\w-]+) -->\s*\n\s*```\w*\n(.*?)```", re.S)
RECIPE = re.compile(r"<!-- recipe ([\w-]+) -->\s*\n\s*```toml\n(.*?)```", re.S)
_ANY = re.compile(r"(?:ckpt|run)_[0-9a-f]*…?|…|\d+(?:\.\d+)?")


def samples() -> dict[str, tuple[str, str]]:
    """{name: (docs page, sample text)} of every marked sample."""
    found = {}
    for page in sorted(DOCS.glob("*.md")):
        for name, text in MARKER.findall(page.read_text()):
            assert name not in found, f"sample {name!r} is marked twice"
            found[name] = (page.name, text)
    return found


def recipes() -> dict[str, str]:
    """{name: workload text} of every marked recipe."""
    found: dict[str, str] = {}
    for page in sorted(DOCS.glob("*.md")):
        for name, text in RECIPE.findall(page.read_text()):
            assert name not in found, f"recipe {name!r} is marked twice"
            found[name] = text
    return found


def recipe(name: str) -> str:
    """The workload file of the recipe ``name``, as the docs give it."""
    return recipes()[name]


def check(name: str, real: str) -> None:
    """The sample ``name`` matches ``real`` (the command's output), line by line, in order."""
    page, text = samples()[name]
    lines = [_spaced(line) for line in real.splitlines()]
    at = 0
    for line in filter(None, (_spaced(s) for s in text.splitlines())):
        pattern = _pattern(line)
        while at < len(lines) and not pattern.fullmatch(lines[at]):
            at += 1
        assert at < len(lines), f"docs/{page} sample {name!r}: no line like\n  {line}\nin:\n{real}"
        at += 1


def _pattern(line: str) -> re.Pattern[str]:
    parts, last = [], 0
    for match in _ANY.finditer(line):
        parts.append(re.escape(line[last : match.start()]))
        token = match.group()
        if token == "…":
            parts.append(".*?")
        elif token.startswith(("ckpt_", "run_")):
            parts.append(token[: token.index("_") + 1] + "[0-9a-f]+")
        else:
            parts.append(r"\d+(?:\.\d+)?")
        last = match.end()
    parts.append(re.escape(line[last:]))
    return re.compile("".join(parts))


def _spaced(line: str) -> str:
    return " ".join(line.split())
