"""The sample outputs of docs/ are the code's: each marked sample is checked by a test that makes
that output (``doc_samples.check``), and the workload-file refusals are made here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import doc_samples

TESTS = Path(__file__).resolve().parent


def test_every_marked_sample_is_checked_by_a_test():
    called = set()
    for path in TESTS.rglob("*.py"):
        called |= set(re.findall(r"doc_samples\.check\(\s*\"([\w-]+)\"", path.read_text()))
    marked = set(doc_samples.samples())
    assert marked and marked <= called, f"checked by no test: {sorted(marked - called)}"
    assert called <= marked, f"no such sample: {sorted(called - marked)}"


def test_every_marked_recipe_is_run_by_a_test():
    run = set()
    for path in TESTS.rglob("*.py"):
        run |= set(re.findall(r"[Rr]ecipe\(\s*\"([\w-]+)\"", path.read_text()))
    marked = set(doc_samples.recipes())
    assert marked and marked <= run, f"run by no test: {sorted(marked - run)}"
    assert run <= marked, f"no such recipe: {sorted(run - marked)}"


def test_the_refusal_sample_is_what_validate_prints(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "workload.toml").write_text(
        'name = "w"\ncomand = "true"\ncode = "code"\n'
        '[[stages]]\nname = "a"\ncommand = "true"\n'
        '[[stages]]\nname = "b"\ncommand = "true"\n'
        '[stages.continuity]\nmode = "checkpointed"\ncheckpoint_paths = ["../x"]\n'
    )
    bad = _validate(tmp_path)
    (tmp_path / "workload.toml").write_text('name = "w"\ncommand = "true"\nenv = =\n')
    broken = _validate(tmp_path)
    assert bad.returncode == broken.returncode == 2
    doc_samples.check("workload-errors", bad.stderr + broken.stderr)


def _validate(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nodus", "validate", "workload.toml"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
    )
