"""nodus.protocol: the one definition of what passes between the runner and a program.

The formats below are the documented ones (docs/internals.md, "Runner ↔ stage program"),
written out literally on purpose: a change to the wire format must fail here first.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodus import protocol

SRC = Path(protocol.__file__).resolve().parent

# Names distinctive enough that a literal anywhere else in src/nodus is a second definition.
PROTOCOL_NAMES = {
    protocol.CONTROL_DIR,
    protocol.SETTINGS_FILE,
    protocol.COMMITTED_FILE,
    protocol.ENV_CHECKPOINT_DIR,
    protocol.ENV_CONTROL_DIR,
    protocol.ENV_RUN_ID,
    protocol.ENV_STAGE,
    protocol.ENV_ATTEMPT,
    protocol.ENV_TMPDIR,
    protocol.ENV_WRITE_DELAY,
    *protocol.CACHE_VARIABLES,
    protocol.INTEGRATION_AUTO,
    protocol.INTEGRATION_HF_TRAINER_V1,
    protocol.EVENT_UNPREPARED,
    protocol.EVENT_REFUSED,
    protocol.EVENT_SAVE_FAILED,
    protocol.EVENT_SAVE_CADENCE,
}
STEP_FOLDER = protocol.checkpoint_folder(0)[:-1]  # "checkpoint-", inside any literal
# (file relative to src/nodus, literal): why the same characters mean something else there
UNRELATED = {
    ("schemas/defaults.py", ".nodus"): "the default $NODUS_HOME, ~/.nodus",
    ("runner/backends/ray_backend.py", "auto"): 'ray.init(address="auto"): an existing cluster',
    ("schemas/defaults.py", "auto"): "hang_timeout = \"auto\": the runner's, never the program's",
}


def _literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal and f-string part that is not documentation.

    A string standing alone as a statement documents (a docstring, or the note under a
    constant); it is prose that may name the protocol's files freely.
    """
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


def test_no_protocol_name_is_written_outside_the_protocol_module():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative == "protocol.py":
            continue
        for line, text in _literals(ast.parse(path.read_text(encoding="utf-8"))):
            named = text in PROTOCOL_NAMES or STEP_FOLDER in text
            if named and (relative, text) not in UNRELATED:
                found.append(f"src/nodus/{relative}:{line}: {text!r}")
    assert not found, "use nodus.protocol instead of:\n" + "\n".join(found)


def test_the_protocol_module_imports_only_the_standard_library():
    # The bootstrap imports it in every Python process of an integration stage.
    code = (
        "import sys, nodus.protocol; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('nodus', 'pydantic', 'torch', 'transformers', 'fsspec')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout.replace("'", '"')) == ["nodus", "nodus.protocol"]


@pytest.mark.parametrize(
    "name, step",
    [("checkpoint-0", 0), ("checkpoint-40", 40), ("checkpoint-", None), ("checkpoint-4a", None)],
)
def test_a_step_folder_name_is_built_and_parsed_in_one_place(name, step):
    assert protocol.checkpoint_step(name) == step
    if step is not None:
        assert protocol.checkpoint_folder(step) == name
    assert protocol.checkpoint_step("checkpoint-²") is None  # a digit int() cannot read
    assert protocol.building_step(protocol.building_folder(12, 4242)) == 12
    assert protocol.building_step("checkpoint-12") is None  # published, not being built


def test_the_documented_formats_round_trip_unchanged():
    settings = {
        "integration": "hf-trainer-v1",
        "save_every": 50,
        "save_each_epoch": False,
        "restored_step": 40,
        "run_id": "run_x",
        "stage": "train",
        "attempt": 2,
        "home": "/h",
    }
    assert protocol.Settings.from_dict(settings).to_dict() == settings
    assert protocol.Settings.from_dict({**settings, "qualifying": True}).qualifying
    auto = {**settings, "save_every": "auto", "max_save_overhead": 0.035}
    assert protocol.Settings.from_dict(auto).to_dict() == auto
    assert protocol.Settings.from_dict(auto).auto_cadence
    request = {"id": 3, "then": "stop"}
    assert protocol.SaveRequest.from_dict(request, 3).to_dict() == request
    record = {
        "step": 40,
        "epoch": 1.25,
        "checkpoint": "checkpoint-40",
        "requests": [3],
        "metrics": {"loss": 2.1, "learning_rate": 4e-05, "epoch": 1.25, "grad_norm": 0.9},
    }
    parsed = protocol.SaveRecord.from_dict(record)
    assert parsed.to_dict() == record
    assert parsed.answering([5, 3]).to_dict()["requests"] == [3, 5]
    commit = {"step": 40, "snapshot": "ckpt_x"}
    assert protocol.CommitRecord.from_dict(commit).to_dict() == commit
    event = {"type": "integration_refused", "details": {"reasons": ["x"]}}
    assert protocol.EventRecord.from_dict(event).to_dict() == event


def test_control_paths_name_every_file_of_the_control_folder(tmp_path):
    paths = protocol.ControlPaths(str(tmp_path))
    assert paths.settings == str(tmp_path / "integration.json")
    assert paths.request(3) == str(tmp_path / "requests" / "3.json")
    assert paths.save_record(40) == str(tmp_path / "saves" / "40.json")
    assert paths.committed == str(tmp_path / "committed.json")
    assert paths.event(7) == str(tmp_path / "events" / "7.json")
    assert paths.build == str(tmp_path / "tmp")
    (tmp_path / "saves").mkdir()
    for name in ("12.json", "5.json", "5.json.99.tmp", "notes.json"):
        (tmp_path / "saves" / name).write_text("{}")
    assert [n for n, _ in protocol.numbered_records(paths.saves)] == [5, 12]
