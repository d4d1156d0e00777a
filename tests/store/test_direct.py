"""Direct (O_DIRECT) copies on the store's side: stored and restored bytes and their hash exact."""

from __future__ import annotations

import errno
import fcntl
import os

import pytest
import xxhash

import nodus.store._io as io_module
import nodus.store.restore as restore_module
from nodus.store import SnapshotInfo, _direct, keys, open_store
from nodus.store._direct import Unsupported, direct_copy, direct_read_copy

CHUNK = 64 * 1024
INFO = SnapshotInfo(run="run_a", stage="train", attempt=1, step=1)
COPIES = {"write": direct_copy, "read": direct_read_copy}


def _copy(tmp_path, side: str, data: bytes, chunk: int = CHUNK):
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    sink = tmp_path / "sink.bin"
    with open(source, "rb", buffering=0) as src, open(sink, "w+b", buffering=0) as dst:
        digest, count = COPIES[side](src.fileno(), dst.fileno(), chunk)
        positions = (src.tell(), dst.tell())
        direct_left_on = any(
            fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT for fd in (src.fileno(), dst.fileno())
        )
    return digest, count, sink.read_bytes(), positions, direct_left_on


@pytest.mark.parametrize("side", COPIES)
@pytest.mark.parametrize(
    "size",
    [0, 1, 4095, 4096, CHUNK, CHUNK + 1, 7 * CHUNK + 123],
    ids=[
        "empty",
        "one-byte",
        "under-a-block",
        "one-block",
        "one-chunk",
        "chunk-plus-one",
        "many-chunks-and-a-tail",
    ],
)
def test_a_direct_copy_is_byte_exact_and_hashes_what_it_wrote(tmp_path, side, size):
    data = os.urandom(size)
    digest, count, written, positions, direct_left_on = _copy(tmp_path, side, data)
    assert written == data  # no block padding in the copy
    assert (digest, count) == (xxhash.xxh3_128(data).hexdigest(), size)
    assert positions == (0, 0)  # a fallback copy can start over from the beginning
    assert not direct_left_on


@pytest.mark.parametrize("side", COPIES)
def test_a_chunk_that_direct_io_cannot_address_is_refused_before_writing(tmp_path, side):
    with pytest.raises(Unsupported):
        _copy(tmp_path, side, b"x" * 10_000, chunk=CHUNK + 1)
    assert (tmp_path / "sink.bin").read_bytes() == b""


@pytest.mark.parametrize("side", COPIES)
def test_a_failed_write_in_a_worker_thread_is_raised_not_hidden(tmp_path, side):
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(6 * CHUNK + 10))
    (tmp_path / "sink.bin").write_bytes(b"")
    with (
        open(source, "rb", buffering=0) as src,
        open(tmp_path / "sink.bin", "rb") as sink,
        pytest.raises(OSError) as caught,  # a sink that cannot be written: EBADF
    ):
        COPIES[side](src.fileno(), sink.fileno(), CHUNK)
    assert caught.value.errno == errno.EBADF


@pytest.fixture
def direct_for_small_files(monkeypatch):
    """Files of 64 KiB and up take the direct paths (in 64 KiB chunks); counts each path's use."""
    monkeypatch.setattr(io_module, "STORE_DIRECT_MIN_BYTES", CHUNK)
    monkeypatch.setattr(_direct, "STORE_DIRECT_CHUNK_BYTES", CHUNK)
    used = {"write": 0, "read": 0}
    for side, name in (("write", "direct_copy"), ("read", "direct_read_copy")):
        real = getattr(io_module, name)

        def counting(*args, _real=real, _side=side):
            result = _real(*args)
            used[_side] += 1
            return result

        monkeypatch.setattr(io_module, name, counting)
    return used


FILES = {
    "state/model.safetensors": os.urandom(5 * CHUNK + 77),
    "state/optimizer.pt": os.urandom(3 * CHUNK),
    "state/small.json": b"{}",
}


def _capture_and_restore(tmp_path):
    live = tmp_path / "live"
    (live / "state").mkdir(parents=True)
    for rel, data in FILES.items():
        (live / rel).write_bytes(data)
        os.utime(live / rel, (1e9, 1e9))  # long written: each file is read once
    store = open_store(str(tmp_path / "store"))
    made = store.capture(str(live), ["state"], info=INFO)
    store.restore(made.id, str(tmp_path / "r"))
    return store


def test_large_files_stored_and_restored_directly_are_byte_exact(tmp_path, direct_for_small_files):
    store = _capture_and_restore(tmp_path)
    assert direct_for_small_files == {"write": 2, "read": 2}  # the small file took the kernel copy
    for rel, data in FILES.items():
        assert (tmp_path / "r" / rel).read_bytes() == data
    report = store.verify()
    assert report.sound and report.files == 3
    blob = store.storage.path(
        keys.blob_key(xxhash.xxh3_128(FILES["state/optimizer.pt"]).hexdigest())
    )
    assert os.path.getsize(blob) == 3 * CHUNK


def test_a_damaged_blob_read_directly_is_refused(tmp_path, direct_for_small_files):
    store = _capture_and_restore(tmp_path)
    blob = store.storage.path(
        keys.blob_key(xxhash.xxh3_128(FILES["state/optimizer.pt"]).hexdigest())
    )
    os.chmod(blob, 0o600)
    with open(blob, "r+b") as handle:
        handle.seek(2 * CHUNK + 5)
        handle.write(b"\xff")
    made = store.list()[0]
    with pytest.raises(Exception, match="do not match the manifest"):
        store.restore(made.id, str(tmp_path / "r2"))
    assert [names for _folder, _dirs, names in os.walk(tmp_path / "r2") if names] == []


def test_a_file_system_that_refuses_direct_io_gets_the_page_cache_copy(tmp_path, monkeypatch):
    def refused(*_args):
        raise Unsupported("O_DIRECT: Invalid argument")

    monkeypatch.setattr(io_module, "STORE_DIRECT_MIN_BYTES", CHUNK)
    monkeypatch.setattr(io_module, "direct_copy", refused)
    monkeypatch.setattr(io_module, "direct_read_copy", refused)
    _capture_and_restore(tmp_path)
    for rel, data in FILES.items():
        assert (tmp_path / "r" / rel).read_bytes() == data


def test_a_restore_that_fails_mid_copy_leaves_no_partial_file(
    tmp_path, direct_for_small_files, monkeypatch
):
    store = _capture_and_restore(tmp_path)
    real = restore_module.copy_hashing

    def copy_then_disk_fails(source, sink, **options):
        real(source, sink, **options)  # the bytes are written, then the disk reports an error
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(restore_module, "copy_hashing", copy_then_disk_fails)
    with pytest.raises(OSError):
        store.restore(store.list()[0].id, str(tmp_path / "r2"))
    assert [names for _folder, _dirs, names in os.walk(tmp_path / "r2") if names] == []
