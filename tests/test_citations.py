"""Comments and docstrings cite what is in the repository (docs/*.md, code), never a document a
reader of the repository cannot open: the product contract and the reference documents it was
drawn from live outside it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Built from parts, so this file does not match itself.
OUTSIDE = re.compile("SPEC" + r" §|\bseed " + r"00\d|shared/" + "seeds")


def test_no_comment_cites_a_document_outside_the_repository():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("src", "tests", "benchmarks", "examples")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not found, "cite docs/*.md or code instead:\n" + "\n".join(found)


def test_the_scan_finds_a_citation_where_there_is_one():
    assert OUTSIDE.search("a bound (" + "SPEC" + " §6)")
    assert OUTSIDE.search("as seed " + "001 says")
    assert not OUTSIDE.search("docs/hf-trainer.md, 'The profile'")
