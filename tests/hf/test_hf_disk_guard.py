"""The disk guard under hf-trainer-v1: the quick-start program, a real `nodus run`.

The free space the guard sees is injected (``NODUS_FREE_BYTES``, inherited by the runner), so
the first save's size already leaves no room for three: the runner turns periodic saves off and
tells the program through ``.nodus/runtime.json``, which stops saving at ``save_every`` and epoch
ends; its final save is still stored, and so are the outputs, equal to a bare run's.
"""

from __future__ import annotations

import pytest
from runner_e2e_helpers import STEPS, Project

from nodus import protocol

pytestmark = [pytest.mark.hf, pytest.mark.slow]


def test_low_free_space_stops_periodic_saves_and_keeps_the_final_save(tmp_path, bare_hash):
    # Each save's write takes 0.5 s and the next save waits for it: the runner has seconds, not
    # the few milliseconds of 30 tiny steps, to turn saves off after the first one even on a
    # machine busy starting a Ray cluster (seen in CI with no delay).
    project = Project(tmp_path, write_delay="0.5")
    proc = project.nodus("run", str(project.file), "--key", "g", env={"NODUS_FREE_BYTES": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SUCCEEDED\n" in proc.stderr and "captures failed" not in proc.stderr

    view = project.get("g")
    disabled = [e for e in view["events"] if e["type"] == "checkpoint_disabled_disk"]
    assert len(disabled) == 1 and disabled[0]["free_bytes"] == 1
    assert disabled[0]["snapshot_bytes"] > 0
    assert "nodus: periodic saves are off: 3 snapshots of" in proc.stdout
    # Only the final state was stored, and the program stopped writing periodic saves: the
    # saves due at steps 36 and 42 (every 6, and 36 ends an epoch) were never made.
    assert project.committed_steps("g") == [STEPS]
    saves = protocol.ControlPaths(str(project.copy_of("g", 1) / protocol.CONTROL_DIR)).saves
    saved = [step for step, _path in protocol.numbered_records(saves)]
    assert STEPS in saved and not {36, 42} & set(saved)
    assert any(e["type"] == "outputs_committed" for e in view["events"])
    assert project.outputs_hash("g") == bare_hash
