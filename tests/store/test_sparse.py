"""Sparse files are stored and restored without their holes filled (issue 39.6).

A file of 1 GiB holding a few bytes of data is captured into a local store and restored: the
blob and the restored file keep its holes (allocated bytes stay small), its bytes read back the
same, and its hash is the one of the dense bytes (the blob format is unchanged). The disk guard
counts what such a file allocates.
"""

from __future__ import annotations

import os

import pytest

from nodus.protocol import content_hasher
from nodus.runner.capture.disk_guard import stored_bytes
from nodus.store import SnapshotInfo, open_store

GIB = 1024**3
INFO = SnapshotInfo(run="run_s", stage="train", attempt=1, step=1)


def _sparse_file(path, size=GIB):
    """``size`` bytes: data at its start and middle, holes between and at its end."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"head" * 1024)
        handle.seek(size // 2)
        handle.write(b"middle")
        handle.truncate(size)
    info = os.stat(path)
    if info.st_blocks * 512 >= size:
        pytest.skip("this file system does not keep holes")
    return path


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def _dense_hash(path) -> str:
    digest = content_hasher()
    with open(path, "rb") as handle:
        while chunk := handle.read(64 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.mark.slow  # a 1 GiB file's length, hashed as zeros
def test_a_sparse_file_is_stored_and_restored_with_its_holes(tmp_path):
    big = _sparse_file(str(tmp_path / "work" / "state" / "big.bin"))
    store = open_store(str(tmp_path / "store"))
    manifest = store.capture(str(tmp_path / "work"), ["state"], info=INFO)
    (entry,) = manifest.files
    assert entry.size == GIB and entry.hash == _dense_hash(big)
    blobs = [
        os.path.join(folder, name)
        for folder, _dirs, names in os.walk(tmp_path / "store" / "blobs")
        for name in names
    ]
    assert len(blobs) == 1
    assert os.path.getsize(blobs[0]) == GIB and _allocated(blobs[0]) < 1024 * 1024

    store.restore(manifest.id, str(tmp_path / "out"))
    restored = tmp_path / "out" / "state" / "big.bin"
    assert restored.stat().st_size == GIB and _allocated(restored) < 1024 * 1024
    with open(restored, "rb") as handle:
        assert handle.read(8) == b"headhead"
        handle.seek(GIB // 2)
        assert handle.read(6) == b"middle"
    assert store.check(manifest.id) == []


def test_the_disk_guard_counts_what_a_sparse_file_allocates(tmp_path):
    _sparse_file(str(tmp_path / "state" / "big.bin"))
    (tmp_path / "state" / "small.json").write_text("{}")
    entries = [("state/big.bin", GIB, 0), ("state/small.json", 2, 0), ("state/gone", 7, 0)]
    counted = stored_bytes(str(tmp_path), entries)
    assert 2 + 7 < counted < 1024 * 1024
