"""A Trainer's folder that is both the run's outputs and its checkpoint path, rotated hard.

The usual layout of a Trainer's ``--output_dir``: the checkpoints the integration publishes
under ``state`` are what retention rotates, and the same folder is the run's outputs. Rotation
frees the blobs of the kinds it deletes, and the outputs snapshot names many of the same blobs
(content addressing): none of them may go while the outputs name them (issue 39.3).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from pathlib import Path

import pytest
import tomli_w
from runner_e2e_helpers import Project

from nodus.store import open_store

pytestmark = [pytest.mark.hf, pytest.mark.slow]


def _tree_hashes(root) -> dict[str, str]:
    found = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def test_a_folder_both_outputs_and_checkpoints_keeps_every_output_file(tmp_path):
    project = Project(
        tmp_path,
        write_delay="0",
        save_every=3,
        keep_recoverable=1,
        keep_adapters=1,
        env={"QUICKSTART_EPOCHS": "2"},
    )
    workload = tomllib.loads(project.file.read_text())
    workload["outputs"] = ["state"]
    project.file.write_text(tomli_w.dumps(workload))

    runner = project.start("run", str(project.file), "--key", "both")
    project.kill_after_save("both", 1, 9, runner)  # the recovery restores by links, too
    assert runner.wait(timeout=600) == 0, Path(runner.log_path).read_text()[-3000:]
    swept = project.nodus("gc")  # the run is finished: retention lets its held save go
    assert swept.returncode == 0, swept.stdout + swept.stderr
    events = project.get("both")["events"]
    deleted = [e for e in events if e["type"] == "snapshot_kind_deleted"]
    assert deleted, "retention deleted nothing: the test proves nothing"
    assert not [e for e in events if e["type"] in ("rotation_failed", "outputs_failed")]

    store = open_store("file://" + str(project.home / "store"))
    (outputs,) = store.list(run=project.get_id("both"), role="outputs")
    assert len(outputs.files) > 10
    target = tmp_path / "outputs"
    proc = project.nodus("runs", "outputs", "both", "--to", str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = _tree_hashes(target)
    assert set(got) == {e.path for e in outputs.files}
    verify = project.nodus("store", "verify", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
