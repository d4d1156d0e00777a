"""``.nodusignore`` reads like ``.gitignore``, exactly: what a source leaves out of a code folder.

Each rule a user relies on has its own test, on a real folder walked as acceptance walks it
(``source.measure``); git itself, where it is installed, is the reference for a set of them.
nodus's own excludes (``.venv``, ``__pycache__``, ...) come first, and ``.git``, ``.nodus`` and
nodus's home last, whatever the file says.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from nodus.runner.workspace import source
from nodus.schemas import defaults
from nodus.store.live_folder import select


def _tree(root, paths):
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)


def _kept(root, ignore: str | bytes, paths, private=()) -> set[str]:
    """The files a run would capture from ``root`` holding ``paths`` and this ``.nodusignore``."""
    _tree(root, paths)
    written = ignore.encode() if isinstance(ignore, str) else ignore
    (root / defaults.IGNORE_FILE).write_bytes(written)
    excludes = source.excludes(str(root), private)
    found = select(str(root), ["."], excludes, lambda _type, _details: None)
    return {candidate.rel for candidate in found} - {defaults.IGNORE_FILE}


def test_a_leading_slash_anchors_to_the_code_folder(tmp_path):
    kept = _kept(tmp_path, "/data\n", ["data/a.bin", "src/data/b.py"])
    assert kept == {"src/data/b.py"}


def test_a_trailing_slash_matches_folders_only_at_any_depth(tmp_path):
    kept = _kept(tmp_path, "build/\n", ["build", "src/build/x.o", "lib/build.py"])
    assert kept == {"build", "lib/build.py"}  # a file named build stays


def test_double_star_matches_at_any_depth_the_top_included(tmp_path):
    kept = _kept(tmp_path, "**/*.ckpt\n", ["model.ckpt", "a/b/step.ckpt", "a/train.py"])
    assert kept == {"a/train.py"}


def test_a_star_stays_within_one_folder(tmp_path):
    kept = _kept(tmp_path, "data/*.bin\n", ["data/x.bin", "data/sub/x.bin", "src/data/y.bin"])
    assert kept == {"data/sub/x.bin", "src/data/y.bin"}  # a pattern with a slash is anchored


def test_a_name_without_slash_matches_files_and_folders_at_any_depth(tmp_path):
    kept = _kept(tmp_path, "scratch\n", ["scratch", "a/scratch/x", "a/scratch2"])
    assert kept == {"a/scratch2"}


def test_comments_are_skipped_and_an_escaped_hash_is_a_name(tmp_path):
    ignore = "# comment\n\\#file\n"
    kept = _kept(tmp_path, ignore, ["#file", "# comment", "comment", "a/#file"])
    assert kept == {"# comment", "comment"}


def test_a_bang_line_brings_back_what_an_earlier_line_left_out(tmp_path):
    kept = _kept(tmp_path, "*.ckpt\n!keep.ckpt\n", ["a.ckpt", "keep.ckpt", "d/keep.ckpt"])
    assert kept == {"keep.ckpt", "d/keep.ckpt"}


def test_an_escaped_bang_is_a_name(tmp_path):
    kept = _kept(tmp_path, "\\!important\n", ["!important", "important"])
    assert kept == {"important"}


def test_a_file_inside_a_left_out_folder_cannot_be_brought_back(tmp_path):
    kept = _kept(tmp_path / "a", "data/\n!data/keep.txt\n", ["data/keep.txt", "data/x"])
    assert kept == set()  # git's rule: the folder is never looked into
    kept = _kept(tmp_path / "b", "data/*\n!data/keep.txt\n", ["data/keep.txt", "data/x"])
    assert kept == {"data/keep.txt"}  # leave out its contents instead, and bring one back


def test_bringing_a_folder_back_does_not_undo_a_line_about_its_contents(tmp_path):
    # pathspec's own verdict would bring src/__pycache__ back through `!src/`; git does not
    kept = _kept(tmp_path, "cache/\n!src/\n", ["src/cache/a", "src/b.py", "cache/c"])
    assert kept == {"src/b.py"}


def test_trailing_spaces_are_dropped_unless_escaped(tmp_path):
    ignore = "notes.txt   \nname\\ \n"
    kept = _kept(tmp_path, ignore, ["notes.txt", "name ", "name", "notes.txt   "])
    assert kept == {"name", "notes.txt   "}


def test_crlf_lines_and_a_byte_order_mark_read_as_git_reads_them(tmp_path):
    kept = _kept(tmp_path, b"\xef\xbb\xbf*.log\r\n!keep.log\r\n", ["a.log", "keep.log"])
    assert kept == {"keep.log"}


def test_folders_under_a_folder_but_not_its_files(tmp_path):
    kept = _kept(tmp_path, "logs/**/\n", ["logs/top.txt", "logs/day1/a.txt", "other/b"])
    assert kept == {"logs/top.txt", "other/b"}


def test_nodus_defaults_apply_first_and_a_bang_line_brings_one_back(tmp_path):
    paths = ["wandb/run/log.txt", ".venv/lib/a.py", ".venv/__pycache__/a.pyc", "train.py"]
    kept = _kept(tmp_path, "!.venv\n", paths)
    # the folder comes back, not the caches inside it: `!.venv` names .venv only
    assert kept == {".venv/lib/a.py", "train.py"}


def test_git_nodus_and_the_home_are_never_source_whatever_the_file_says(tmp_path):
    paths = [".git/HEAD", ".nodus/settings.json", "home/catalog.db", "train.py"]
    ignore = "!.git\n!.git/\n!.nodus\n!home\n!*\n"
    kept = _kept(tmp_path, ignore, paths, private=[str(tmp_path / "home")])
    assert kept == {"train.py"}


def test_resolve_lists_the_lines_as_read_between_the_defaults_and_what_is_never_source(tmp_path):
    (tmp_path / defaults.IGNORE_FILE).write_text("# data\n/data  \n\n!keep\\ \n")
    patterns = list(source.excludes(str(tmp_path)))
    first = len(defaults.SOURCE_DEFAULT_EXCLUDES)
    assert patterns[first : first + 2] == ["/data", "!keep\\ "]
    assert patterns[first + 2 :] == list(defaults.SOURCE_EXCLUDES)


PROBE = """
import sys
from nodus.runner.workspace import source
found = source.measure(sys.argv[1], source.excludes(sys.argv[1]), ["main"], 1 << 40)
print(found.files, "pathspec" in sys.modules)
"""


def test_without_a_nodusignore_no_pathspec_is_loaded(tmp_path):
    _tree(tmp_path, ["train.py", "__pycache__/a.pyc"])
    probe = [sys.executable, "-c", PROBE, str(tmp_path)]
    answer = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.split()
    assert answer == ["1", "False"]
    (tmp_path / defaults.IGNORE_FILE).write_text("*.md\n")
    answer = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.split()
    assert answer == ["2", "True"]  # train.py and .nodusignore itself


# Each: the .nodusignore lines, and a tree. git decides which files it would leave untracked.
AGAINST_GIT = [
    (["/data"], ["data/a", "src/data/b", "data2"]),
    (["data/"], ["data", "src/data/b"]),
    (["**/*.ckpt", "!**/keep.ckpt"], ["model.ckpt", "a/b/m.ckpt", "a/keep.ckpt"]),
    (["data/*.bin"], ["data/x.bin", "data/sub/x.bin"]),
    (["\\#file", "# comment"], ["#file", "# comment", "other"]),
    (["a/", "!a/x"], ["a/x", "a/y"]),
    (["x/**", "!x/keep"], ["x/keep", "x/other", "x/sub/f"]),
    (["__cache__/", "!src/"], ["src/__cache__/a", "src/b.py", "__cache__/c"]),
    (["*", "!*/", "!*.py"], ["a.py", "b.txt", "d/c.py", "d/e.txt"]),
    (["a/**/b", "!a/x/b"], ["a/b", "a/x/b", "a/x/y/b/z", "b"]),
    (["*.log", "!logs/"], ["logs/a.log", "logs/b.txt"]),
    (["foo   ", "bar\\ "], ["foo", "foo   ", "bar", "bar "]),
    (["/*", "!/src"], ["a", "src/a", "b/c"]),
    (["d?/[ab]*", "!d1/b*"], ["d1/a", "d1/b", "d2/bc", "d2/c", "dd/x/a"]),
    (["**/", "!/top/"], ["f", "top/g", "top/sub/h", "x/y"]),
    (["***/z"], ["z", "a/z", "a/b/z"]),
]


def _git_leaves(root, lines) -> set[str]:
    (root / ".gitignore").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1", "XDG_CONFIG_HOME": ""}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "-o", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return {path for path in listed.split("\0") if path} - {".gitignore", defaults.IGNORE_FILE}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is the reference here")
@pytest.mark.parametrize("lines, paths", AGAINST_GIT, ids=[" | ".join(c[0]) for c in AGAINST_GIT])
def test_the_same_files_as_git_leaves_untracked(tmp_path, lines, paths):
    kept = _kept(tmp_path, "\n".join(lines) + "\n", paths)
    assert kept - {".gitignore"} == _git_leaves(tmp_path, lines)


def test_the_excludes_in_force_are_what_resolve_prints(tmp_path):
    (tmp_path / defaults.IGNORE_FILE).write_text("/data\n")
    found = source.measure(str(tmp_path), source.excludes(str(tmp_path)), ["main"], 1 << 40)
    shown = json.loads(json.dumps(found.to_dict()))["excludes"]
    assert shown == [*defaults.SOURCE_DEFAULT_EXCLUDES, "/data", *defaults.SOURCE_EXCLUDES]
