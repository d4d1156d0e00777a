"""Each concept is defined once: these fail when a second definition, or a copy that drifted from
the first, appears (issue 29).

The backend names, the duration grammar, the snapshot-id grammar, the content hash, the word
"weights" (an artifact kind and a continuation mode, spelled alike) and what the command line
prints each have one home; the tests below read the places that must agree with it.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from nodus import protocol
from nodus.cli import build_parser
from nodus.errors import UsageError
from nodus.runner.backends.base import backend
from nodus.runner.control.pause_request import parse_duration
from nodus.schemas import backends, fields, units
from nodus.schemas.jsonschema import workload_json_schema
from nodus.schemas.models import Backend
from nodus.schemas.snapshot_ref import is_snapshot_id
from nodus.store import keys
from nodus.store.kinds import KIND_WEIGHTS, KINDS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nodus"


def _sources(*folders: Path):
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            yield path, path.read_text(encoding="utf-8")


def _options(parser: argparse.ArgumentParser, dest: str) -> list[argparse.Action]:
    """Every ``dest`` option of ``parser`` and of its subcommands, however deep."""
    found = []
    for action in parser._actions:
        if action.dest == dest:
            found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _options(sub, dest)
    return found


# --- backend names -----------------------------------------------------------------------------


def test_the_backends_the_workload_accepts_are_the_ones_the_runner_runs():
    assert all(backend(name).entry.name == name for name in backends.REGISTRY)
    assert [member.value for member in Backend] == list(backends.NAMES)
    assert workload_json_schema()["$defs"]["Backend"]["enum"] == list(backends.NAMES)
    assert backends.DEFAULT in backends.NAMES


def test_the_command_line_offers_the_same_backends():
    options = _options(build_parser(), "backend")
    assert len(options) >= 2  # nodus run, nodus runs resume
    assert all(tuple(option.choices) == backends.NAMES for option in options)


# --- duration grammar ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["30s", " 10m ", "1h", "2d", "90", "1.5", "0.5m", "0", "0s", "1w", "", "s", "-1", "1e3"]
)
def test_a_workload_duration_and_a_deadline_read_the_same_grammar(text):
    pattern = workload_json_schema()["$defs"]["Execution"]["properties"]["unrecorded_retry"]
    string_form = next(form["pattern"] for form in pattern["anyOf"] if form["type"] == "string")
    try:
        seconds = fields.duration_seconds(text)
    except ValueError:
        seconds = None
    assert seconds == units.duration_seconds(text)
    assert (re.search(string_form, text) is not None) == (seconds is not None)
    if seconds:
        assert parse_duration(text) == seconds
    else:  # a deadline must be positive besides
        with pytest.raises(UsageError):
            parse_duration(text)


def test_the_duration_units_are_written_in_one_place():
    found = [
        path.relative_to(SRC).as_posix()
        for path, text in _sources(SRC)
        if "[smhd]" in text or '"h": 3600' in text
    ]
    assert found == ["schemas/units.py"]


# --- snapshot ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["checkpoint", "source", "outputs"])
def test_every_id_the_store_makes_is_one_a_reference_reads(role):
    made = keys.new_snapshot_id(role)
    assert is_snapshot_id(made) and keys.is_snapshot_id is is_snapshot_id


# --- the content hash ---------------------------------------------------------------------------


def test_one_content_hash_is_chosen_in_one_place():
    found = [
        path.relative_to(ROOT).as_posix()
        for path, text in _sources(SRC, ROOT / "benchmarks")
        if re.search(r"\bxxh3_|\bimport xxhash|\bfrom xxhash", text)
    ]
    assert found == ["src/nodus/protocol.py"]
    prefixed = [
        f"{path.relative_to(SRC).as_posix()}:{line}"
        for path, text in _sources(SRC)
        for line, literal in _literals(ast.parse(text))
        if protocol.CONTENT_PREFIX in literal and path.name != "protocol.py"
    ]
    assert not prefixed, "use protocol.CONTENT_PREFIX: " + ", ".join(prefixed)
    digest = protocol.content_hasher()
    digest.update(b"nodus")
    assert keys.hash_of_blob_key(keys.blob_key(digest.hexdigest())) == digest.hexdigest()
    assert f"{protocol.CONTENT_HASH}:" == protocol.CONTENT_PREFIX


# --- "weights": an artifact kind and a continuation mode ---------------------------------------

# (file relative to src/nodus, literal): why the same characters mean something else there
OTHER_MEANINGS = {
    ("stages/hf/inprocess/session.py", "weights"): "a key of the parent-weights event record",
}


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal that is not a docstring."""
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_kinds_and_continuation_modes_are_named_by_their_constants():
    assert KIND_WEIGHTS in KINDS and protocol.MODE_WEIGHTS in protocol.CONTINUATION_MODES
    words = {*KINDS, *protocol.CONTINUATION_MODES} - {"state", "files"}  # common words besides
    homes = {"store/kinds.py", "protocol.py"}
    found = []
    for path, text in _sources(SRC):
        relative = path.relative_to(SRC).as_posix()
        for line, literal in _literals(ast.parse(text)):
            if (
                relative not in homes
                and literal in words
                and (relative, literal) not in OTHER_MEANINGS
            ):
                found.append(f"src/nodus/{relative}:{line}: {literal!r}")
    assert not found, "use store.kinds.KIND_* or protocol.MODE_*/FULL_STATE:\n" + "\n".join(found)


# --- what the command line prints ---------------------------------------------------------------


def test_commands_print_through_one_set_of_helpers():
    """``nodus: …`` messages, ``--json`` documents and tables come from ``cli/output.py``."""
    copies = []
    for path, text in _sources(SRC / "cli"):
        if path.name in ("output.py", "__init__.py"):  # __init__: errors before any command
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in (
                "say",
                "print_json",
                "table",
                "client",
            ):
                copies.append(f"{path.name}:{node.lineno}: def {node.name}")
        if 'print(f"nodus: ' in text:
            copies.append(f"{path.name}: prints a message of its own")
        if "indent=2" in text and path.name != "workload.py":  # workload.py renders files
            copies.append(f"{path.name}: prints JSON of its own")
    assert not copies, "\n".join(copies)


# --- managed methods ----------------------------------------------------------------------------


def test_each_managed_method_is_described_once():
    from nodus.schemas.method_specs import METHODS
    from nodus.schemas.models import Framework

    assert [framework.value for framework in Framework] == list(METHODS)
    compared = [
        path.relative_to(SRC).as_posix()
        for path, text in _sources(SRC)
        if re.search(r"""(==|!=)\s*["'](sft|dpo|grpo)["']|Framework\.(SFT|DPO|GRPO)\b""", text)
    ]
    # the `trl` extension's qualification cases are users' programs built on TRL's trainers
    # (stages/hf/extensions.py), not managed methods
    assert compared == ["stages/hf/qualify_extensions.py"]
