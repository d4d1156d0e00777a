"""Snapshots laid out one over another, as a stage's working copy is: which file of which
snapshot each path gets, and only the paths asked for written, verified."""

from __future__ import annotations

import os

import pytest

from nodus.errors import SnapshotDamagedError
from nodus.store import SnapshotInfo, keys, open_store
from nodus.store.kinds import KIND_FILES
from nodus.store.manifest import FileEntry, Manifest
from nodus.store.restore import layered, write_layers

from .trees import read_tree, write_tree


def _manifest(name: str, *paths: str, deleting: frozenset[str] = frozenset()) -> Manifest:
    files = tuple(FileEntry(p, 1, 0o644, f"{name}-{p}", KIND_FILES) for p in paths)
    return Manifest(name, "r", None, 0, None, None, {}, "source", 0.0, files, deleting)


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ([("a", "x", "d/y")], {"x": "a", "d/y": "a"}),
        ([("a", "x", "d/y"), ("b", "d/y")], {"x": "a", "d/y": "b"}),  # the later one wins
        ([("a", "x"), ("b", "x/y")], None),  # a file of one is a folder of the other
        ([("a", "d/e/f"), ("b", "d/e")], None),
        ([("a", "d/e/f"), ("b", "d/g")], {"d/e/f": "a", "d/g": "b"}),
    ],
)
def test_layered_says_which_snapshot_lays_out_each_path(layers, expected):
    files = layered([_manifest(name, *paths) for name, *paths in layers])
    assert (None if files is None else {p: s for p, (s, _e) in files.items()}) == expected


def test_layered_leaves_out_the_kinds_being_deleted_as_a_restore_does():
    files = layered([_manifest("a", "x", deleting=frozenset({KIND_FILES}))])
    assert files == {}


def _capture(store, folder, files: dict[str, str]):
    write_tree(folder, files)
    info = SnapshotInfo(run="r", stage=None, attempt=0, step=None, role="source")
    return store.capture(str(folder), ["."], info=info)


def test_write_layers_writes_only_the_paths_named_each_from_its_snapshot(tmp_path):
    store = open_store("file://" + str(tmp_path / "store"))
    source = _capture(store, tmp_path / "s", {"a.py": "a", "d/b.py": "b", "c.py": "c"})
    outputs = _capture(store, tmp_path / "o", {"d/b.py": "b from outputs"})
    files = layered([source, outputs])
    assert files is not None
    target = tmp_path / "copy"
    write_tree(target, {"c.py": "left as it was"})

    write_layers(store.storage, files, ["a.py", "d/b.py"], str(target))

    assert read_tree(target) == {
        "a.py": b"a",
        "d/b.py": b"b from outputs",
        "c.py": b"left as it was",
    }


def test_write_layers_refuses_an_altered_blob_and_lays_nothing_of_its_snapshot(tmp_path):
    store = open_store("file://" + str(tmp_path / "store"))
    source = _capture(store, tmp_path / "s", {"a.py": "a", "b.py": "b"})
    entry = next(e for e in source.files if e.path == "b.py")
    blob = store.storage.local_file(keys.blob_key(entry.hash))
    assert blob is not None
    os.chmod(blob, 0o600)  # changed behind the store's back, as root could
    with open(blob, "r+b") as handle:
        handle.write(b"X")
    files = layered([source])
    assert files is not None
    target = tmp_path / "copy"
    target.mkdir()

    with pytest.raises(SnapshotDamagedError, match=r"b\.py"):
        write_layers(store.storage, files, ["a.py", "b.py"], str(target))
    assert read_tree(target) == {}
