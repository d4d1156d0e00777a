"""The store's seam holds: outside ``nodus/store`` nothing imports its private modules or
reaches past a store into what keeps its objects.

A source scan of the package (and of the benchmarks and examples, which users read as models):
imports of ``nodus.store._…``, and ``.backend`` or private attributes taken from a store.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "src" / "nodus" / "store"
SCANNED = [ROOT / "src" / "nodus", ROOT / "benchmarks", ROOT / "examples"]


def violations(source: str) -> list[str]:
    """What in ``source`` goes past the store's public surface, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for module in _imported(node):
            parts = module.split(".")
            if parts[:2] == ["nodus", "store"] and any(p.startswith("_") for p in parts[2:]):
                found.append(f"line {node.lineno}: imports {module}")
        if isinstance(node, ast.Attribute) and _reaches_in(node):
            found.append(f"line {node.lineno}: uses {ast.unparse(node)}")
    return found


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value.startswith("nodus.store.") else []  # import_module()
    return []


def _reaches_in(node: ast.Attribute) -> bool:
    owner = ast.unparse(node.value).rsplit(".", 1)[-1].lower()
    private = node.attr.startswith("_") and not node.attr.startswith("__")
    return "store" in owner and (node.attr == "backend" or private)


def _modules() -> list[Path]:
    files = [path for folder in SCANNED for path in sorted(folder.rglob("*.py"))]
    return [path for path in files if STORE not in path.parents]


def test_nothing_outside_the_store_goes_past_its_public_surface():
    offending = {
        str(path.relative_to(ROOT)): found
        for path in _modules()
        if (found := violations(path.read_text(encoding="utf-8")))
    }
    assert offending == {}


@pytest.mark.parametrize(
    "source",
    [
        "from nodus.store._io import hash_stream",
        "import nodus.store._direct",
        "from nodus.store import _io",
        "importlib.import_module('nodus.store._io')",
        "located.store.backend.read(key)",
        "store._storage.write(key, data)",
        "self._store._ids()",
    ],
)
def test_the_scan_catches_each_way_past_the_surface(source):
    assert violations(source) != []


def test_the_scan_lets_public_use_through():
    assert _modules(), "nothing was scanned"
    public = (
        "from nodus.store import open_store, keys\n"
        "store = open_store(url)\n"
        "store.storage.read(keys.manifest_key(i))\n"
        "store.hold_records.write(i, 'pin', {})\n"
        "workload.execution.backend\n"
    )
    assert violations(public) == []
