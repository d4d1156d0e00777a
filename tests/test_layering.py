"""The packages depend on each other one way only, as docs/internals.md draws them.

A source scan of every ``import`` in ``src/nodus`` (lazy imports inside functions and imports for
type checkers included): a package may import only the packages listed for it here, and the
runner's rooms (``runner/<room>/``) only the rooms below them. Two rules matter most: the runner
side never imports the code loaded into the user's training process (``stages.hf.inprocess``),
and ``store`` and ``stages`` know nothing of each other or of the runner above them. Inside a
room no module imports another in a circle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "nodus"
BASE = {"errors", "protocol", "_atomic", "_logging"}
ALLOWED = {
    "cli": {
        "client",
        "qualify",
        "ui",
        "inventory",
        "runner",
        "registry",
        "retention",
        "store",
        "stages",
        "schemas",
        *BASE,
    },
    "ui": {"client", "inventory", "schemas", *BASE},  # inventory: its words for its shapes
    "client": {"inventory", "runner", "registry", "retention", "store", "schemas", *BASE},
    "inventory": {"runner", "registry", "retention", "store", "stages", "schemas", *BASE},
    "qualify": {"runner", "stages", "store", "schemas", *BASE},
    "runner": set(),  # runner/__init__.py: the map, no code
    "registry": {"retention", "store", "schemas", *BASE},
    "retention": {"store", "schemas", *BASE},
    "store": {"schemas", *BASE},
    "stages": {"schemas", *BASE},
    "stages.hf.inprocess": {"stages", "schemas", *BASE},
    "schemas": {"errors", "protocol", "_atomic", "_logging"},
    "testing": {"protocol"},
    "protocol": set(),
    "errors": set(),
    "_atomic": set(),
    "_logging": set(),
    "__main__": {"cli"},
    "": {"client", "schemas", "errors"},  # nodus/__init__.py
}

# The runner's rooms, bottom first: each may import the rooms listed for it and, outside the
# runner, the packages below it.
_BELOW_RUNNER = {"registry", "retention", "store", "stages", "schemas", *BASE}
RUNNER_ROOMS = {
    "catalog": set(),
    "workspace": set(),
    "recovery": {"catalog"},
    "processes": {"catalog"},
    "upkeep": {"catalog"},
    "remote": {"catalog", "upkeep", "workspace"},
    "control": {"catalog", "processes"},
    "capture": {"catalog", "remote", "upkeep", "workspace"},
    "attempt": {"catalog", "processes", "workspace", "recovery", "upkeep", "remote", "capture"},
    "backends": {"catalog", "processes", "workspace", "upkeep", "remote", "attempt"},
    "engine": {
        "catalog",
        "processes",
        "workspace",
        "recovery",
        "upkeep",
        "remote",
        "control",
        "attempt",
        "backends",
    },
}
RUNNER_ROOMS["submit"] = {*RUNNER_ROOMS["engine"], "engine"}
for _name, _rooms in RUNNER_ROOMS.items():
    ALLOWED[f"runner.{_name}"] = {f"runner.{room}" for room in _rooms} | _BELOW_RUNNER


def _room(module: str) -> str:
    """The package a dotted ``nodus…`` module belongs to, as ALLOWED names them."""
    parts = module.split(".")[1:]
    if parts[:3] == ["stages", "hf", "inprocess"]:
        return "stages.hf.inprocess"
    if parts[:1] == ["runner"] and len(parts) > 1:
        return f"runner.{parts[1]}"
    return parts[0] if parts else ""


def _allowed(room: str, target: str) -> bool:
    if target == room or target in ALLOWED[room]:
        return True
    # Outside the runner, every room of it counts as "runner".
    return (
        not room.startswith("runner")
        and target.startswith("runner.")
        and "runner" in (ALLOWED[room])
    )


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
            if not _allowed(room, target):
                problems.append(f"{path.relative_to(root)} ({room}) imports {imported} ({target})")
    return problems


def circles(root: Path = SRC) -> list[list[str]]:
    """Modules of one room that import each other in a circle (each circle once, sorted)."""
    modules = {_module_of(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for imported in _modules_imported(path, modules):
            if imported != module and _room(imported) == _room(module):
                graph[module].add(imported)
    return [sorted(found) for found in _strongly_connected(graph) if len(found) > 1]


def _modules_imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules an import runs: ``from p import m`` runs ``p.m`` when that is a module (and
    the package ``p`` besides, which ``p.m`` belongs to: not an edge of its own here)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                names.append(inner if inner in modules else node.module)
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            while name and name not in modules:  # a name inside a module: the module
                name = name.rpartition(".")[0]
            if name.startswith("nodus"):
                found.add(name)
    return found


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the graph's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    found.append(_pop_component(stack, node))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def _pop_component(stack: list[str], root: str) -> list[str]:
    """The component rooted at ``root``: the stack's nodes down to ``root``, popped."""
    component = []
    while True:
        member = stack.pop()
        component.append(member)
        if member == root:
            return component


def test_every_import_points_down_the_drawing():
    assert violations() == []


def test_no_room_imports_itself_in_a_circle():
    assert circles() == []


def test_the_scan_catches_a_circle_inside_a_room(tmp_path):
    root = tmp_path / "nodus"
    for name, text in {
        "runner/attempt/a.py": "from nodus.runner.attempt.b import B\n",
        "runner/attempt/b.py": "def f():\n    from nodus.runner.attempt.a import A\n",
        "runner/attempt/c.py": "from nodus.runner.attempt.a import A\n",
        "runner/catalog/d.py": "from nodus.runner.catalog import e\n",
        "runner/catalog/e.py": "x = 1\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert circles(root) == [["nodus.runner.attempt.a", "nodus.runner.attempt.b"]]


def test_the_scan_catches_an_upward_import(tmp_path):
    root = tmp_path / "nodus"
    for name, text in {
        "store/leak.py": "def f():\n    from nodus.runner.catalog.core import Catalog\n",
        "runner/attempt/leak.py": "import nodus.stages.hf.inprocess.hook\n",
        "stages/fine.py": "from nodus.schemas import defaults\n",
        "runner/upkeep/up.py": "from nodus.runner.attempt.attempt import Attempt\n",
        "runner/attempt/down.py": "from nodus.runner.upkeep.rotation import Rotation\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert violations(root) == [
        "runner/attempt/leak.py (runner.attempt) imports nodus.stages.hf.inprocess.hook "
        "(stages.hf.inprocess)",
        "runner/upkeep/up.py (runner.upkeep) imports nodus.runner.attempt.attempt (runner.attempt)",
        "runner/upkeep/up.py (runner.upkeep) imports nodus.runner.attempt.attempt.Attempt "
        "(runner.attempt)",
        "store/leak.py (store) imports nodus.runner.catalog.core (runner.catalog)",
        "store/leak.py (store) imports nodus.runner.catalog.core.Catalog (runner.catalog)",
    ]
