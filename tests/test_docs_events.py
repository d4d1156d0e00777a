"""The run log's event types agree in three places: the code that records them, the one list of
them (``nodus.runner.catalog.event_types``) and docs/cli.md's "Event types" table.

The code is scanned, not run: every call that records an event (``add_event``, ``event``,
``_event``, ``on_event``, ``write_event``, the catalog's ``event_row``) names its type as a
string literal or an upper-case constant; a lower-case name forwards a type its caller chose and
is followed there instead.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from nodus import protocol
from nodus.runner.catalog.event_types import EVENT_TYPES

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nodus"
DOC = ROOT / "docs" / "cli.md"

# the call's name -> which positional argument is the event's type
RECORDERS = {
    "add_event": 1,
    "has_event": 1,
    "event_row": 3,
    "event": 0,
    "_event": 0,
    "on_event": 0,
    "write_event": 0,
}


def _constants(root: Path) -> dict[str, set[str]]:
    """Every module-level ``NAME = "text"`` under ``root``, by name (a name may have several)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in root.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                value = node.value
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    for target in targets:
                        if isinstance(target, ast.Name) and target.id.isupper():
                            found[target.id].add(value.value)
    return found


def recorded_types(root: Path = SRC) -> dict[str, set[str]]:
    """The event types the code under ``root`` records, each with where (``path:line``)."""
    constants = _constants(root)
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            index = RECORDERS.get(name or "")
            if index is None or len(node.args) <= index:
                continue
            where = f"{path.relative_to(root)}:{node.lineno}"
            for type_ in _types_of(node.args[index], constants, where):
                found[type_].add(where)
    return found


def _types_of(arg: ast.expr, constants: dict[str, set[str]], where: str) -> set[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    name = arg.attr if isinstance(arg, ast.Attribute) else getattr(arg, "id", "")
    if not name or not name.isupper():
        return set()  # forwarded (``type_``, ``event.type``), or not an event type at all
    assert name in constants, f"{where}: the event type {name} is no module-level constant"
    return constants[name]


def _program_types() -> set[str]:
    """The program side's types: ``nodus.protocol``'s ``EVENT_*`` (the hf-trainer-v1 code
    passes them along under names of its own, e.g. ``refuse(kind=...)``)."""
    return {
        value
        for name, value in vars(protocol).items()
        if name.startswith("EVENT_") and isinstance(value, str)
    }


def documented_types(text: str) -> list[str]:
    """The first column of the table under docs/cli.md's "### Event types"."""
    section = text.split("\n### Event types\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)


def test_the_list_names_each_type_once():
    assert len(EVENT_TYPES) == len(set(EVENT_TYPES))


def test_every_type_the_code_records_is_listed():
    recorded = recorded_types()
    unlisted = {t: sorted(where) for t, where in recorded.items() if t not in EVENT_TYPES}
    assert unlisted == {}
    assert _program_types() <= set(EVENT_TYPES)


def test_every_listed_type_is_recorded_somewhere():
    recorded = set(recorded_types()) | _program_types()
    assert sorted(set(EVENT_TYPES) - recorded) == []


def test_the_docs_table_names_exactly_the_listed_types():
    documented = documented_types(DOC.read_text(encoding="utf-8"))
    assert len(documented) == len(set(documented))
    assert sorted(documented) == sorted(EVENT_TYPES)


def test_the_scan_finds_literals_and_constants(tmp_path):
    (tmp_path / "a.py").write_text(
        'GONE = "thing_gone"\n'
        "def f(catalog, ctx, type_):\n"
        '    catalog.add_event("run", "thing_made", {})\n'
        "    ctx.event(GONE, {})\n"
        "    ctx.event(type_, {})\n"
    )
    assert recorded_types(tmp_path) == {"thing_made": {"a.py:3"}, "thing_gone": {"a.py:4"}}
