"""docs/benchmarks.md stays today's figures: one table per area whose rows give a measure, its
figure, the command that takes it again, its target and the date it was measured; every script
in benchmarks/ is there, and every command it shows runs a script that exists with options that
script takes. The history of the figures is git's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SCRIPTS = ROOT / "benchmarks"
HEADER = "| measure | figure | command | target | date |"
_COMMAND = re.compile(r"`[^`]*?benchmarks/(\w+)\.py([^`]*)`")


def _options(script: str) -> set[str]:
    """The ``--options`` a benchmark script (or a sibling module it imports) defines."""
    text = (SCRIPTS / f"{script}.py").read_text(encoding="utf-8")
    found = set(re.findall(r"[\"'](--[\w-]+)[\"']", text))
    for sibling in re.findall(r"^import (\w+)", text, re.M):
        if (SCRIPTS / f"{sibling}.py").exists():
            found |= _options(sibling)
    return found


def test_every_script_has_its_figures_and_every_command_runs():
    text = DOC.read_text(encoding="utf-8")
    named = {script for script, _ in _COMMAND.findall(text)}
    assert sorted(p.stem for p in SCRIPTS.glob("*.py")) == sorted(named)
    for script, arguments in _COMMAND.findall(text):
        unknown = set(re.findall(r"(?<!\S)(--[\w-]+)", arguments)) - _options(script)
        assert unknown == set(), f"benchmarks/{script}.py takes no {sorted(unknown)}"


def test_every_table_is_a_current_one():
    tables = re.findall(r"(?:^\|.*\|\n)+", DOC.read_text(encoding="utf-8"), re.M)
    assert tables
    for table in tables:
        header, _rule, *rows = table.splitlines()
        assert header == HEADER
        for row in rows:
            cells = [cell.strip() for cell in row.strip("|").split(" | ")]
            assert len(cells) == 5, row
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", cells[-1]), row


def test_links_into_it_find_their_heading():
    headings = re.findall(r"^#+ (.+)$", DOC.read_text(encoding="utf-8"), re.M)
    anchors = {re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-") for h in headings}
    for doc in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        for anchor in re.findall(r"benchmarks\.md#([\w-]+)", doc.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{doc.name} links to benchmarks.md#{anchor}"
