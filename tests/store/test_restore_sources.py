"""Restores that write no copy: hard links to blobs, files moved in from a set-aside folder.

Every one is verified: a blob whose bytes were changed behind the store's back is refused, and a
set-aside file that does not hash to its entry is never taken.
"""

from __future__ import annotations

import os
import stat
import time

import pytest

from nodus.errors import SnapshotDamagedError
from nodus.store import SnapshotInfo, keys, open_store

from .trees import read_tree, write_tree

CHECKPOINT = "state/checkpoint-10"
WEIGHTS = f"{CHECKPOINT}/model.safetensors"
FILES = {WEIGHTS: b"w" * 300_000, f"{CHECKPOINT}/trainer_state.json": b'{"step": 10}'}


@pytest.fixture
def store_url(tmp_path):
    return "file://" + str(tmp_path / "store")


@pytest.fixture
def captured(store_url, tmp_path):
    """A store object and the snapshot it took of a published checkpoint by hard links."""
    live = tmp_path / "live"
    write_tree(live, {**FILES, "train.py": "print('hi')\n"})
    _age(live)
    store = open_store(store_url)
    info = SnapshotInfo(run="run_a", stage="train", attempt=1, step=10)
    manifest = store.capture(str(live), ["state"], info=info, immutable=[CHECKPOINT])
    return store, manifest


def _age(folder) -> None:
    """Every file's mtime 10 s back: out of the capture's racy window."""
    past = time.time() - 10
    for parent, _dirs, names in os.walk(folder):
        for name in names:
            os.utime(os.path.join(parent, name), (past, past))


def blob_file(store, manifest, path: str) -> str:
    entry = next(e for e in manifest.files if e.path == path)
    return store.storage.local_file(keys.blob_key(entry.hash))


def corrupt(path: str, keep_mtime: bool = False) -> None:
    """Change a byte of the file in place, as root or a program holding its inode could."""
    before = os.stat(path)
    os.chmod(path, 0o600)  # root writes anyway; any other user must lift the mode first
    with open(path, "r+b") as handle:
        handle.write(b"X")
    os.chmod(path, stat.S_IMODE(before.st_mode))
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_linked_restore_writes_no_copy(captured, tmp_path):
    store, manifest = captured
    target = tmp_path / "copy"
    store.restore(manifest.id, str(target), link=[CHECKPOINT])
    assert read_tree(target) == FILES
    restored = os.stat(target / WEIGHTS)
    assert restored.st_ino == os.stat(blob_file(store, manifest, WEIGHTS)).st_ino
    assert stat.S_IMODE(restored.st_mode) & 0o222 == 0  # never written through
    entry = next(e for e in manifest.files if e.path == WEIGHTS)
    assert restored.st_mtime_ns == entry.mtime_ns


def test_files_outside_the_linked_folders_are_copied(captured, tmp_path):
    store, manifest = captured
    target = tmp_path / "copy"
    store.restore(manifest.id, str(target))
    restored = os.stat(target / WEIGHTS)
    assert restored.st_ino != os.stat(blob_file(store, manifest, WEIGHTS)).st_ino
    assert read_tree(target) == FILES


@pytest.mark.parametrize("fresh", [False, True], ids=["same-store-object", "fresh-store-object"])
def test_a_linked_restore_refuses_a_blob_whose_bytes_changed(captured, store_url, tmp_path, fresh):
    store, manifest = captured
    corrupt(blob_file(store, manifest, WEIGHTS))
    restoring = open_store(store_url) if fresh else store
    target = tmp_path / "copy"
    with pytest.raises(SnapshotDamagedError, match=r"model\.safetensors"):
        restoring.restore(manifest.id, str(target), link=[CHECKPOINT])
    assert read_tree(target) == {}  # nothing half applied


def test_a_new_process_verifies_even_a_blob_changed_with_its_mtime_put_back(
    captured, store_url, tmp_path
):
    store, manifest = captured
    corrupt(blob_file(store, manifest, WEIGHTS), keep_mtime=True)
    with pytest.raises(SnapshotDamagedError):
        open_store(store_url).restore(manifest.id, str(tmp_path / "copy"), link=[CHECKPOINT])


def test_a_set_aside_file_that_verifies_is_moved_in_and_others_stay(captured, tmp_path):
    store, manifest = captured
    aside = tmp_path / "previous"
    write_tree(aside, {WEIGHTS: FILES[WEIGHTS], f"{CHECKPOINT}/trainer_state.json": b"{}"})
    kept = os.stat(aside / WEIGHTS).st_ino
    target = tmp_path / "copy"
    store.restore(manifest.id, str(target), reuse=str(aside))
    assert read_tree(target) == FILES
    assert os.stat(target / WEIGHTS).st_ino == kept  # moved, not copied
    # The file that does not hash to its entry was not taken: the blob's bytes were restored.
    assert read_tree(aside) == {f"{CHECKPOINT}/trainer_state.json": b"{}"}


def test_a_set_aside_blob_link_is_refused_when_the_blob_changed(captured, tmp_path):
    """The previous copy's file is the blob's own inode (a save stored by a link)."""
    store, manifest = captured
    aside = tmp_path / "previous"
    (aside / CHECKPOINT).mkdir(parents=True)
    os.link(blob_file(store, manifest, WEIGHTS), aside / WEIGHTS)
    corrupt(blob_file(store, manifest, WEIGHTS))
    target = tmp_path / "copy"
    with pytest.raises(SnapshotDamagedError):
        store.restore(manifest.id, str(target), reuse=str(aside))
    assert read_tree(target) == {}


def test_a_set_aside_file_reached_through_a_symlink_is_never_moved(captured, tmp_path):
    store, manifest = captured
    elsewhere = tmp_path / "elsewhere"
    write_tree(elsewhere, {"checkpoint-10/model.safetensors": FILES[WEIGHTS]})
    aside = tmp_path / "previous"
    aside.mkdir()
    os.symlink(elsewhere, aside / "state")
    store.restore(manifest.id, str(tmp_path / "copy"), reuse=str(aside))
    assert (elsewhere / "checkpoint-10" / "model.safetensors").exists()
    assert read_tree(tmp_path / "copy") == FILES


def test_a_sound_set_aside_file_does_not_hide_a_damaged_blob(captured, tmp_path):
    """The snapshot must restore from the store alone: its damage is found, as a copy finds it."""
    store, manifest = captured
    aside = tmp_path / "previous"
    write_tree(aside, {WEIGHTS: FILES[WEIGHTS]})  # the program's own file, not the blob's inode
    corrupt(blob_file(store, manifest, WEIGHTS))
    with pytest.raises(SnapshotDamagedError):
        store.restore(manifest.id, str(tmp_path / "copy"), reuse=str(aside))


def test_stored_blobs_are_read_only(store_url, tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"state/checkpoint-1/data.bin": b"d" * 2_000_000, "notes.txt": "n"})
    store = open_store(store_url)
    manifest = store.capture(
        str(live), ["."], info=SnapshotInfo(run="run_a", stage="train", attempt=1, step=1)
    )
    for entry in manifest.files:
        info = os.stat(store.storage.local_file(keys.blob_key(entry.hash)))
        assert stat.S_IMODE(info.st_mode) & 0o222 == 0, entry.path


def _copied_capture(store_url, tmp_path):
    """A store object and its capture (by copy, as a directory-contract program's checkpoint)
    of a live working copy at ``tmp_path/copy``, which is then set aside as a recovery does."""
    live = tmp_path / "copy"
    write_tree(live, FILES)
    _age(live)
    store = open_store(store_url)
    info = SnapshotInfo(run="run_a", stage="train", attempt=1, step=10)
    manifest = store.capture(str(live), ["state"], info=info)
    aside = tmp_path / "previous"
    os.rename(live, aside)
    return store, manifest, aside


def test_a_file_this_store_captured_and_nobody_touched_since_is_moved_in(store_url, tmp_path):
    store, manifest, aside = _copied_capture(store_url, tmp_path)
    kept = os.stat(aside / WEIGHTS).st_ino
    store.restore(manifest.id, str(tmp_path / "copy"), reuse=str(aside))
    assert read_tree(tmp_path / "copy") == FILES
    assert os.stat(tmp_path / "copy" / WEIGHTS).st_ino == kept


@pytest.mark.parametrize("fresh", [False, True], ids=["same-store-object", "fresh-store-object"])
def test_a_captured_file_changed_with_its_size_and_mtime_put_back_is_not_taken(
    store_url, tmp_path, fresh
):
    """What the capture hashed is known only while the file's whole state (its ctime too) is
    the one hashed: a write since, whatever it put back, means the file is read again."""
    store, manifest, aside = _copied_capture(store_url, tmp_path)
    corrupt(str(aside / WEIGHTS), keep_mtime=True)
    restoring = open_store(store_url) if fresh else store
    restoring.restore(manifest.id, str(tmp_path / "copy"), reuse=str(aside))
    assert read_tree(tmp_path / "copy") == FILES  # the snapshot's bytes, from the blob
