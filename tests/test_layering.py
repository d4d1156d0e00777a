"""The packages depend on each other one way only, as docs/internals.md draws them.

A source scan of every ``import`` in ``src/nodus`` (lazy imports inside functions included): a
package may import only the packages listed for it here. Two rules matter most: the runner side
never imports the code loaded into the user's training process (``stages.hf.inprocess``), and
``store`` and ``stages`` know nothing of each other or of the runner above them.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nodus"
BASE = {"errors", "protocol", "_atomic"}
ALLOWED = {
    "cli": {
        "client",
        "inventory",
        "runner",
        "registry",
        "retention",
        "store",
        "stages",
        "schemas",
        *BASE,
    },
    "client": {"inventory", "runner", "registry", "retention", "store", "schemas", *BASE},
    "inventory": {"runner", "registry", "retention", "store", "stages", "schemas", *BASE},
    "runner": {"registry", "retention", "store", "stages", "schemas", *BASE},
    "registry": {"retention", "store", "schemas", *BASE},
    "retention": {"store", "schemas", *BASE},
    "store": {"schemas", *BASE},
    "stages": {"schemas", *BASE},
    "stages.hf.inprocess": {"stages", "schemas", *BASE},
    "schemas": {"errors", "protocol", "_atomic"},
    "testing": {"protocol"},
    "protocol": set(),
    "errors": set(),
    "_atomic": set(),
    "__main__": {"cli"},
    "": {"client", "schemas", "errors"},  # nodus/__init__.py
}


def _room(module: str) -> str:
    """The package a dotted ``nodus…`` module belongs to, as ALLOWED names them."""
    parts = module.split(".")[1:]
    if parts[:3] == ["stages", "hf", "inprocess"]:
        return "stages.hf.inprocess"
    return parts[0] if parts else ""


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "nodus":
                found.update(f"nodus.{alias.name}" for alias in node.names)
            elif node.module.startswith("nodus."):
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("nodus."))
    return found


def _module_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def violations(root: Path = SRC) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        room = _room(_module_of(path, root))
        for imported in sorted(_imports(path)):
            target = _room(imported)
            if target != room and target not in ALLOWED[room]:
                problems.append(f"{path.relative_to(root)} ({room}) imports {imported} ({target})")
    return problems


def test_every_import_points_down_the_drawing():
    assert violations() == []


def test_the_scan_catches_an_upward_import(tmp_path):
    root = tmp_path / "nodus"
    for name, text in {
        "store/leak.py": "def f():\n    from nodus.runner.catalog import Catalog\n",
        "runner/leak.py": "import nodus.stages.hf.inprocess.hook\n",
        "stages/fine.py": "from nodus.schemas import defaults\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert violations(root) == [
        "runner/leak.py (runner) imports nodus.stages.hf.inprocess.hook (stages.hf.inprocess)",
        "store/leak.py (store) imports nodus.runner.catalog (runner)",
        "store/leak.py (store) imports nodus.runner.catalog.Catalog (runner)",
    ]
