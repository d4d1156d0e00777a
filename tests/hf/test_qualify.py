"""Point 7: qualified environments and `nodus qualify` (the real runner, interrupted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hf_helpers import QUICKSTART

from nodus.stages.hf import QUALIFY_DATA, QUALIFY_PROGRAM, qualification

pytestmark = pytest.mark.hf

OTHER = {"torch": "2.99.0", "transformers": "4.57.6", "accelerate": "1.12.0", "datasets": "4.4.2"}


def test_shipped_sets_qualify_the_reference_and_ci_versions_only(tmp_path):
    reference = {
        "torch": "2.7.1",
        "transformers": "4.57.6",
        "accelerate": "1.12.0",
        "datasets": "4.4.2",
    }
    assert qualification.is_qualified(reference, None)
    assert qualification.is_qualified({**reference, "torch": "2.13.0+cpu"}, None)
    assert not qualification.is_qualified(OTHER, str(tmp_path))
    reason = qualification.unqualified_reason(OTHER)
    assert "torch 2.99.0" in reason and "nodus qualify" in reason


def test_a_failed_record_qualifies_nothing_a_passed_one_does(tmp_path):
    qualification.record_result(str(tmp_path), OTHER, False, {})
    assert not qualification.is_qualified(OTHER, str(tmp_path))
    qualification.record_result(str(tmp_path), OTHER, True, {})
    assert qualification.is_qualified(OTHER, str(tmp_path))


@pytest.mark.slow
def test_nodus_qualify_passes_here_and_records_the_result(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-m", "nodus", "qualify", "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["passed"] and result["reference"] == result["resumed"]
    assert result["resumed_from"] == [5, 12, 27, 27]  # the last one after the mid-save kill
    # the runner ran it: each kill was an interruption it recovered from by itself
    attempts = result["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost"] * 4 + ["succeeded"]
    assert all(a["detail"] == "killed by SIGKILL, which nodus did not send" for a in attempts[:4])
    assert [a["restored_step"] for a in attempts] == [None, *result["resumed_from"]]
    record = json.loads((home / "qualified.json").read_text())
    versions = qualification.current_versions()
    assert [e["torch"] for e in record["environments"] if e["passed"]] == [versions["torch"]]
    assert not os.listdir(home / "tmp")  # the suite cleans up after itself


@pytest.mark.parametrize(
    ("shipped", "example"), [(QUALIFY_PROGRAM, "train.py"), (QUALIFY_DATA, "train.txt")]
)
def test_the_qualification_program_is_the_quick_start_program(shipped, example):
    assert Path(shipped).read_bytes() == (QUICKSTART / example).read_bytes(), (
        f"examples/quickstart/{example} changed: run `make quickstart-program` to ship it to "
        "nodus qualify as well"
    )


def test_the_command_line_offers_every_extension():
    from nodus.cli.qualify import EXTENSION_NAMES
    from nodus.stages.hf.extensions import EXTENSIONS

    assert tuple(EXTENSIONS) == EXTENSION_NAMES


def test_an_environment_that_does_not_train_deterministically_is_named_so(tmp_path):
    """Two bare runs that differ (CUDA's default kernels): no resume is blamed for it."""
    from nodus import qualify as suite

    class Unsteady(suite._Suite):
        hashes = iter(["aaaa", "bbbb"])

        def _reference(self, name: str) -> str:
            return next(self.hashes)

        def _accept(self) -> str:
            raise AssertionError("nothing runs under nodus once the bare runs differ")

    result = Unsteady(str(tmp_path), lambda line: None, suite.Case()).run()
    assert not result.passed
    assert result.problems == [suite.NOT_DETERMINISTIC]
    assert "full_determinism=True" in result.problems[0]
