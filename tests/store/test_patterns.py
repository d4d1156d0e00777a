"""Exclude patterns (nodus's own, and a selection's): what a capture leaves out."""

from __future__ import annotations

import pytest

from nodus.store import SnapshotInfo, open_store
from nodus.store.live_folder import excluded

from .trees import write_tree


@pytest.mark.parametrize(
    "patterns, left_out, kept",
    [
        # a name matches at any depth; a path with "/" matches itself and what is under it
        (["*.pyc"], ["a.pyc", "pkg/sub/b.pyc"], ["a.py", "pyc/a.py"]),
        (["data/raw"], ["data/raw", "data/raw/x.bin"], ["raw/x.bin", "data/raw2"]),
        # the last pattern that matches decides; "!" brings back what an earlier one left out
        ([".venv", "!.venv"], [], [".venv/lib/a.py"]),
        (["!.venv", ".venv"], [".venv/lib/a.py"], []),
        (["*.bin", "!keep.bin"], ["a.bin", "d/b.bin"], ["keep.bin", "d/keep.bin"]),
        # a folder left out takes everything under it: name the files, not the folder
        (["data", "!data/keep.txt"], ["data/keep.txt"], []),
        (["data/*", "!data/keep.txt"], ["data/other.txt"], ["data/keep.txt"]),
        # bringing a folder back does not bring back the caches inside it
        ([".venv", "__pycache__", "!.venv"], [".venv/__pycache__/a.pyc"], [".venv/a.py"]),
        # literal names and paths against globs: still the last that matches decides
        (["data/raw", "!data/*"], [], ["data/raw/x.bin"]),
        (["!data/*", "data/raw"], ["data/raw/x.bin"], ["data/other"]),
        (["*.bin", "!keep.bin", "*.bin"], ["keep.bin"], []),
        (["keep.bin", "!*.bin"], [], ["keep.bin", "d/keep.bin"]),
        (["!keep.bin", "*.bin"], ["keep.bin"], ["keep.txt"]),
        # a literal that looks like a glob's neighbour is matched as itself only
        (["state/checkpoint-1"], ["state/checkpoint-1/a"], ["state/checkpoint-10/a"]),
    ],
)
def test_excluded(patterns, left_out, kept):
    assert [rel for rel in left_out if not excluded(rel, patterns)] == []
    assert [rel for rel in kept if excluded(rel, patterns)] == []


def test_no_line_brings_the_runner_private_folder_back(tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"train.py": b"x", ".nodus/settings.json": b"{}", "a.log": b"l"})
    store = open_store(str(tmp_path / "store"))
    info = SnapshotInfo(run="run_a", stage=None, attempt=0, step=None, role="source")
    manifest = store.capture(str(live), ["."], info=info, excludes=["*", "!*"])
    assert sorted(entry.path for entry in manifest.files) == ["a.log", "train.py"]
