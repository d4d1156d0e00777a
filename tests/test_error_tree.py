"""Every exception class nodus defines is in the error tree of ``nodus.errors``.

A source scan of ``src/nodus``: each class that derives (through classes defined anywhere in
nodus) from a built-in exception must derive from ``NodusError`` too, so the CLI reports it as
a message and an exit status, never a traceback (docs/sdk.md, "Errors") — unless it is on the
short list below of exceptions that never leave the code that raises them. And the tree as
``nodus.errors`` and docs/sdk.md draw it names every class of ``nodus.errors``, under its parent.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
from pathlib import Path

import nodus.errors as errors

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nodus"
TREE_ROOT = "NodusError"

# module:class → why it is outside the tree. Each is raised and caught in its own room (the
# handler turns it into an event, an attempt's outcome or a NodusError); none reaches a user.
INTERNAL = {
    "runner/processes/stage_process.py:CannotStartError": (
        "caught by runner.attempt (the attempt fails, its message the detail) and the standby"
    ),
    "runner/workspace/layout.py:MissingSecretError": (
        "caught by runner.attempt: the attempt fails, naming the secret"
    ),
    "runner/attempt/prepare.py:NothingIntactError": (
        "caught in runner.attempt: the stage fails, naming the damaged snapshots"
    ),
    "runner/capture/capturer.py:_FolderChanged": "control flow of one capture: capture_skipped",
    "runner/capture/capturer.py:_NewerCheckpoint": "control flow of one capture: a newer save",
    "runner/backends/slurm_jobs.py:SlurmError": (
        "caught in the Slurm backend: sbatch's refusal fails the attempt, a check refuses the "
        "run (UsageError), an unanswered look at the job is asked again"
    ),
    "qualify.py:_Failed": "control flow of one qualification case: reported as its failure",
    "store/_direct.py:Unsupported": "a fast copy the filesystem lacks: store._io falls back",
    "store/_direct.py:_Refused": "control flow of store._direct: the fallback copy",
    "store/upload.py:_GaveUp": "control flow of the upload queue: the snapshot stays unrecorded",
    "store/fields.py:Damage": (
        "a field of a stored record that does not read: the store reports SnapshotDamagedError"
    ),
}


def _classes() -> dict[str, tuple[str, list[str]]]:
    """Every class of src/nodus: ``module:name`` → (name, the names of its bases)."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [_name(base) for base in node.bases]
                found[f"{module}:{node.name}"] = (node.name, [b for b in bases if b])
    return found


def _name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):  # errors.StoreError, fields.Damage
        return base.attr
    return None


def _ancestors(name: str, by_name: dict[str, list[list[str]]], seen: set[str]) -> set[str]:
    """The names ``name`` derives from, through nodus's own classes (any of the same name)."""
    if name in seen:
        return set()
    seen.add(name)
    found = {name}
    for bases in by_name.get(name, []):
        for base in bases:
            found |= _ancestors(base, by_name, seen)
    return found


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


@functools.cache
def _exception_classes() -> dict[str, set[str]]:
    """``module:name`` → its ancestors' names, for every class that is an exception."""
    classes = _classes()
    by_name: dict[str, list[list[str]]] = {}
    for name, bases in classes.values():
        by_name.setdefault(name, []).append(bases)
    exceptions = {}
    for where, (name, _bases) in classes.items():
        ancestors = _ancestors(name, by_name, set())
        if any(_is_builtin_exception(a) for a in ancestors):
            exceptions[where] = ancestors
    return exceptions


def test_the_scan_finds_the_tree_and_the_exceptions_outside_it():
    found = _exception_classes()
    # Not vacuous: the tree's own classes and the internal ones are all seen by the scan.
    assert {f"errors.py:{name}" for name in _tree_classes()} <= set(found)
    assert set(INTERNAL) <= set(found), sorted(set(INTERNAL) - set(found))


def test_every_exception_nodus_defines_derives_from_the_root_or_is_internal():
    outside = sorted(
        where
        for where, ancestors in _exception_classes().items()
        if TREE_ROOT not in ancestors and where not in INTERNAL
    )
    assert not outside, (
        "exceptions outside the tree of nodus.errors (derive from NodusError, or add one that "
        "never reaches a user to INTERNAL with why):\n" + "\n".join(outside)
    )


def test_the_internal_ones_really_are_outside_the_tree():
    found = _exception_classes()
    inside = sorted(where for where in INTERNAL if TREE_ROOT in found.get(where, set()))
    assert not inside, f"in the tree already, drop from INTERNAL: {inside}"


def _tree_classes() -> list[str]:
    return [
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.NodusError)
    ]


def _drawn_tree(text: str) -> dict[str, str]:
    """A tree drawn with ``├──``/``└──``: each name → its parent's name."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        match = re.match(r"^\s*((?:[│ ]   )*)(?:[├└]── )?(\w+Error) \(\d\)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        name = match.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((depth, name))
    return parents


def _check_drawn(parents: dict[str, str]) -> None:
    for name in _tree_classes():
        if name == TREE_ROOT:
            continue
        assert name in parents, f"{name} is missing from the drawn tree"
        cls = getattr(errors, name)
        assert parents[name] == cls.__bases__[0].__name__, (name, parents[name])
        assert f"({cls.exit_status})" in _line_of(name)


def _line_of(name: str) -> str:
    docstring = errors.__doc__ or ""
    return next(line for line in docstring.splitlines() if re.search(rf"\b{name} \(", line))


def test_the_tree_in_the_module_docstring_has_every_class_under_its_parent():
    _check_drawn(_drawn_tree(errors.__doc__ or ""))


def test_the_tree_in_the_sdk_docs_has_every_class_under_its_parent():
    _check_drawn(_drawn_tree((ROOT / "docs" / "sdk.md").read_text()))


def test_a_stale_attempt_is_no_store_failure():
    # A handler of store failures (outputs_failed, capture_failed) must not swallow fencing.
    assert not issubclass(errors.StaleAttemptError, errors.StoreError)
    assert issubclass(errors.StaleAttemptError, errors.NodusError)
