"""Point 6: each profile violation is refused by explicit v1 and run unprepared under auto.

The program builds one Trainer per violation in one process, under a real `nodus run`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from runner_e2e_helpers import Project

pytestmark = pytest.mark.hf

# violation -> words its reason must contain
VIOLATIONS = {
    "fp16": "fp16=True",
    "subclass": "Trainer subclass",
    "workers": "dataloader_num_workers=2",
    "iterable": "streaming data",
    "peft": "PEFT",
    "save_only_model": "save_only_model=True",
    "load_best": "load_best_model_at_end=True",
}


@pytest.fixture
def short_root():
    """A project folder with a short path.

    Under ``auto`` the ``workers`` violation trains with two DataLoader workers, which share
    tensors over an AF_UNIX socket made in ``$TMPDIR``: the attempt's private temp folder under
    ``$NODUS_HOME``. Below pytest's long tmp_path that socket's path passes the 108-byte limit
    and the workers hang (a limitation of the runner's TMPDIR, reported on its own).
    """
    root = Path(tempfile.mkdtemp(prefix="nodus-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _run(tmp_path, integration: str, kind: str) -> str:
    """Run the violations program; check one ``kind`` event per violation; the program's log."""
    project = Project(
        tmp_path,
        program="violations.py",
        integration=integration,
        save_every=1,
        write_delay="0",
        env={"VIOLATIONS": ",".join(VIOLATIONS), "QUICKSTART_MAX_STEPS": "2"},
    )
    proc = project.nodus("run", str(project.file), "--key", "v", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    view = project.get("v")
    log = project.log_of(view["stages"][0]["attempts"][0])
    events = [e for e in view["events"] if e["type"].startswith("integration_")]
    assert [e["type"] for e in events] == [kind] * len(VIOLATIONS)
    for (name, words), event in zip(VIOLATIONS.items(), events):
        assert any(words in reason for reason in event["reasons"]), (name, event)
    # refused or unprepared, nothing was saved: no save record, no snapshot holding a file
    assert not os.listdir(project.control("v", 1).saves)
    assert not [m for m in project.snapshots("v") if m.files]
    return log


def test_explicit_v1_refuses_each_violation_naming_its_reason(short_root):
    log = _run(short_root, "hf-trainer-v1", "integration_refused")
    for name in VIOLATIONS:
        assert f"VIOLATION {name} refused 1" in log
    assert "trained" not in log


def test_auto_runs_each_violation_unprepared_and_records_why(short_root):
    # unprepared means untouched: save_every=1 produced no integration saves
    log = _run(short_root, "auto", "integration_unprepared")
    for name in VIOLATIONS:
        assert f"VIOLATION {name} trained" in log
