"""Every package's map is true: its ``__init__.py`` docstring names each of its modules
(``x.py``) and sub-packages (``x/``), and every ``x.py`` or ``x/`` it names exists.

A name counts where it resolves from the package's folder, from a folder above it (a sibling
room's module, ``attempt/pausing.py``), from the repository's root (``tests/…``, ``docs/``), or
as the tail of a path below the package (a map that draws a sub-package's modules under it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nodus"

_MODULE = re.compile(r"(?<![\w.$/-])((?:[a-z_][\w]*/)*[a-z_][\w]*\.py)\b")
_FOLDER = re.compile(r"(?<![\w.$/-])((?:[a-z_][\w]*/)+)(?![\w.])")


def packages(root: Path = SRC) -> list[Path]:
    return sorted(path.parent for path in root.rglob("__init__.py"))


def members(package: Path) -> list[str]:
    """The package's modules (``x.py``) and its folders holding Python code (``x/``)."""
    found = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    for folder in package.iterdir():
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.rglob("*.py")):
            found.append(f"{folder.name}/")
    return sorted(found)


def docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text("utf-8"))) or ""


def unnamed(package: Path) -> list[str]:
    """The members the package's map leaves out."""
    text = docstring(package)
    named = {m.split("/")[0] + "/" for m in _FOLDER.findall(text)}
    named |= {m.rsplit("/", 1)[-1] for m in _MODULE.findall(text)}
    named |= {m.split("/")[0] + "/" for m in _MODULE.findall(text) if "/" in m}
    return [member for member in members(package) if member not in named]


def missing(package: Path, root: Path = SRC, repo: Path = ROOT) -> list[str]:
    """The ``x.py`` and ``x/`` the package's map names that do not exist."""
    text = docstring(package)
    names = _MODULE.findall(text) + _FOLDER.findall(text)
    bases = [package, *[p for p in package.parents if p.is_relative_to(root)], repo]
    below = [p.relative_to(package).as_posix() for p in package.rglob("*")]
    return [
        name
        for name in names
        if not any((base / name).exists() for base in bases)
        and not any(f"/{p}/".endswith(f"/{name.rstrip('/')}/") for p in below)
    ]


def test_every_package_names_each_of_its_modules():
    gaps = {str(p.relative_to(SRC.parent)): unnamed(p) for p in packages()}
    assert {name: gap for name, gap in gaps.items() if gap} == {}


def test_every_module_a_package_map_names_exists():
    stale = {str(p.relative_to(SRC.parent)): missing(p) for p in packages()}
    assert {name: names for name, names in stale.items() if names} == {}


def test_the_check_sees_a_missing_and_a_stale_name(tmp_path):
    package = tmp_path / "nodus" / "room"
    (package / "inner").mkdir(parents=True)
    (package / "inner" / "deep.py").write_text("")
    (package / "__init__.py").write_text('"""The room.\n\n    a.py   here\n    gone.py  not\n"""\n')
    (package / "a.py").write_text("")
    (package / "b.py").write_text("")
    assert unnamed(package) == ["b.py", "inner/"]
    assert missing(package, tmp_path / "nodus", tmp_path) == ["gone.py"]
