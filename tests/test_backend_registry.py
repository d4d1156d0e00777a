"""The backend registry drives everything that knows of backends (issue 41).

Adding a backend is a module of its own and an entry of :mod:`nodus.schemas.backends`
(docs/internals.md): these fail when a backend's name, keys or options are spelled somewhere the
registry does not reach (the command line's choices and options, the workload schema, the rules
for keys only some backends read, the detached runner's options), or when generic code reaches a
backend's module other than through the registry.
"""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path

import pytest

from nodus.cli import build_parser
from nodus.errors import UsageError, WorkloadError
from nodus.runner.attempt.context import Placement
from nodus.runner.backends.base import backend, option_values
from nodus.runner.submit import detach
from nodus.schemas import backends
from nodus.schemas.jsonschema import workload_json_schema
from nodus.schemas.loader import resolve_file

SRC = Path(__file__).resolve().parents[1] / "src" / "nodus"
RAY_MODULES = {
    "runner/backends/ray_backend.py",
    "runner/backends/ray.py",
    "runner/backends/node.py",
}
SLURM_MODULES = {
    "runner/backends/slurm_backend.py",
    "runner/backends/slurm.py",
    "runner/backends/slurm_jobs.py",
    "runner/backends/slurm_node.py",
}


def _subcommand(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("name", backends.NAMES)
def test_each_entry_names_the_module_that_implements_it(name):
    entry = backends.REGISTRY[name]
    assert entry.runner.startswith("nodus.runner.backends.")
    assert backend(name).entry is entry
    assert importlib.import_module(entry.runner).BACKEND is backend(name)


def test_the_schema_and_the_command_line_offer_the_registrys_backends():
    assert workload_json_schema()["$defs"]["Backend"]["enum"] == list(backends.NAMES)
    parser = build_parser()
    for command in (("run",), ("runs", "resume")):
        sub = _subcommand(parser, *command)
        flags = {flag for action in sub._actions for flag in action.option_strings}
        assert {o.flag for o in backends.drive_options()} <= flags
        choices = next(a.choices for a in sub._actions if a.dest == "backend")
        assert tuple(choices) == backends.NAMES


def test_a_drive_option_reaches_the_detached_runner_as_it_was_given():
    values = {option.flag: f"value-of-{option.dest}" for option in backends.drive_options()}
    for name in backends.NAMES:
        placement = Placement.given(name, values)
        args = detach.parser().parse_args(["run-1", "--home", "/h", *placement.argv()])
        assert Placement.given(args.backend, option_values(args)) == placement
        for flag, value in values.items():
            assert placement.option(flag) == value


def test_an_option_no_backend_takes_is_refused_naming_those_they_take():
    with pytest.raises(UsageError, match="--no-such-option") as refused:
        Placement.given(None, {"--no-such-option": "x"})
    assert all(option.flag in str(refused.value) for option in backends.drive_options())


@pytest.mark.parametrize(
    ("name", "key"),
    [(e.name, key) for e in backends.REGISTRY.values() for key in e.execution_keys],
)
def test_a_key_only_some_backends_read_is_refused_on_the_others(tmp_path, name, key):
    value = {
        "shared_store": "true",
        "partition": '"p"',
        "account": '"a"',
        "qos": '"q"',
        "sbatch_options": '["--exclusive"]',
    }.get(key, "2")
    path = tmp_path / "w.toml"
    base = 'name = "w"\ncommand = ["python", "t.py"]\n[execution]\n'
    path.write_text(f'{base}backend = "{name}"\n{key} = {value}\n')
    assert resolve_file(path).stages[0].execution.backend == name
    others = [n for n, e in backends.REGISTRY.items() if key not in e.execution_keys]
    for other in others:
        path.write_text(f'{base}backend = "{other}"\n{key} = {value}\n')
        with pytest.raises(WorkloadError, match=f'has no effect.*only backend = .*"{name}"'):
            resolve_file(path)


def _code_names(path: Path) -> set[str]:
    """The identifiers and the string literals (not the prose: docstrings) of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documents = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in documents
        ):
            found.add(node.value)
    return found


@pytest.mark.parametrize(
    ("spelled", "modules"),
    [
        ({"ray", "--ray-address", "ray_address", "BACKEND_RAY", "RAY"}, RAY_MODULES),
        ({"slurm", "sbatch", "scontrol", "scancel", "SLURM"}, SLURM_MODULES),
    ],
    ids=["ray", "slurm"],
)
def test_only_a_backends_own_modules_and_the_registry_name_it(spelled, modules):
    naming = {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if _code_names(path) & spelled
    }
    assert naming <= modules | {"schemas/backends.py"}


def test_generic_code_reaches_a_backend_only_through_the_registry():
    modules = {entry.runner for entry in backends.REGISTRY.values()}
    modules |= {"nodus.runner.backends.ray", "nodus.runner.backends.node"}
    modules |= {f"nodus.runner.backends.{m}" for m in ("slurm", "slurm_jobs", "slurm_node")}
    importing = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("runner/backends/") and relative != "runner/backends/base.py":
            continue  # a backend's own modules
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                importing.append(f"{relative}: {node.module}")
            if isinstance(node, ast.Import):
                importing += [f"{relative}: {a.name}" for a in node.names if a.name in modules]
    assert importing == []
