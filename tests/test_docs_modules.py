"""The docs name only modules that exist, and docs/internals.md draws the layering the layering
test enforces.

Every dotted ``nodus.…`` name in docs/*.md and README.md is a module, or a name a module defines
or imports at its top level (``nodus.Client``: the package's lazy ``__all__``); every path into
the source (``runner/attempt/attempt.py``, ``src/…``, ``tests/…``) exists. docs/internals.md is
held closer: every ``x.py`` it names is a module of nodus, and its two tables of what may import
what are exactly ``tests/test_layering.py``'s ``ALLOWED`` and ``RUNNER_ROOMS``.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from test_layering import _BELOW_RUNNER, ALLOWED, BASE, RUNNER_ROOMS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
INTERNALS = ROOT / "docs" / "internals.md"

# ``nodus.db`` and ``nodus.log`` are files a person sees, not modules
NOT_MODULES = {"nodus.db", "nodus.log"}
_DOTTED = re.compile(r"(?<![\w./-])nodus(?:\.\w+)+")
_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.py)\b")
_BARE = re.compile(r"(?<![\w./-])([a-z_]\w*\.py)\b")
_SHORT = {"runner", "stages", "inventory", "registry", "retention", "schemas", "cli", "protocol"}
_SUFFIXES = {"py", "log", "json", "md", "toml"}
_TOP = {p.name for p in (SRC / "nodus").iterdir()} | {"nodus", "src", "tests", "benchmarks"}


def _module_file(dotted: str) -> Path | None:
    path = SRC.joinpath(*dotted.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.exists():
            return candidate
    return None


@cache
def _top_names(path: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level (``__all__`` included)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names.update(ast.literal_eval(node.value))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def dotted_exists(name: str) -> bool:
    """``nodus.a.b`` is a module, or ``nodus.a.b.c`` a top-level name of the module ``a.b``."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        found = _module_file(".".join(parts[:end]))
        if found is not None:
            return end == len(parts) or parts[end] in _top_names(found)
    return False


def path_exists(path: str) -> bool:
    """A path into the source: from the repository, from ``src/`` or from ``src/nodus/``."""
    return any((base / path).exists() for base in (ROOT, SRC, SRC / "nodus"))


def _short_dotted(text: str) -> set[str]:
    """``runner.x.y`` in inline code: a module path without ``nodus.`` (fenced code is left
    out, and ``store.``/``client.``, which the examples use as variables)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found = set()
    for code in re.findall(r"`([^`]+)`", prose):
        for name in re.findall(r"(?<![\w./-])([a-z_]\w*(?:\.\w+)+)", code):
            first, last = name.split(".")[0], name.rsplit(".", 1)[-1]
            if first in _SHORT and last not in _SUFFIXES:
                found.add(f"nodus.{name}")
    return found


def stale_names(text: str) -> list[str]:
    dotted = {m.rstrip(".") for m in _DOTTED.findall(text)} - NOT_MODULES
    dotted |= _short_dotted(text)
    paths = {p for p in _PATH.findall(text) if p.split("/")[0] in _TOP}
    missing = {d for d in dotted if not dotted_exists(d)} | {p for p in paths if not path_exists(p)}
    return sorted(missing)


def test_every_module_a_doc_names_exists():
    stale = {doc.name: stale_names(doc.read_text(encoding="utf-8")) for doc in DOCS}
    assert {doc: names for doc, names in stale.items() if names} == {}


def test_every_file_internals_names_is_a_module_of_nodus():
    modules = {p.name for p in (SRC / "nodus").rglob("*.py")}
    named = set(_BARE.findall(INTERNALS.read_text(encoding="utf-8")))
    assert sorted(named - modules) == []


def _table(text: str, heading: str) -> dict[str, set[str]]:
    """The table under ``heading``: each row's `name` → the `names` in its second column
    (`base` standing for ``errors``, ``protocol`` and ``_atomic``)."""
    section = text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    table = {}
    for name, allowed in re.findall(r"^\| `([\w.]+)` \| ([^|]*) \|", section, re.M):
        names = set(re.findall(r"`([\w.]+)`", allowed))
        table[name] = (names - {"base"}) | (BASE if "base" in names else set())
    return table


def test_internals_draws_the_packages_the_layering_test_allows():
    text = INTERNALS.read_text(encoding="utf-8")
    packages = {
        ("" if k == "nodus" else k): v for k, v in _table(text, "### Who imports whom").items()
    }
    expected = {k: v for k, v in ALLOWED.items() if not k.startswith("runner.")}
    assert packages == expected


def test_internals_draws_the_runners_rooms_the_layering_test_allows():
    text = INTERNALS.read_text(encoding="utf-8")
    rooms = _table(text, "### The runner's rooms")
    assert rooms == {room: set(below) for room, below in RUNNER_ROOMS.items()}
    # each room may import, outside the runner, what the doc says: the packages below it
    assert all(
        ALLOWED[f"runner.{room}"] - _BELOW_RUNNER == {f"runner.{r}" for r in below}
        for room, below in RUNNER_ROOMS.items()
    )
