"""Direct (O_DIRECT) capture writes: the stored bytes and their hash are exactly the source's."""

from __future__ import annotations

import fcntl
import os

import pytest
import xxhash

import nodus.store._io as io_module
from nodus.schemas import defaults
from nodus.store import SnapshotInfo, keys, open_store
from nodus.store._direct import Unsupported, direct_copy

CHUNK = 64 * 1024
INFO = SnapshotInfo(run="run_a", stage="train", attempt=1, step=1)


def _copy(tmp_path, data: bytes, chunk: int = CHUNK):
    source = tmp_path / "source.bin"
    source.write_bytes(data)
    sink = tmp_path / "sink.bin"
    with open(source, "rb", buffering=0) as src, open(sink, "w+b", buffering=0) as dst:
        digest, count = direct_copy(src.fileno(), dst.fileno(), chunk)
        positions = (src.tell(), dst.tell())
        direct_left_on = bool(fcntl.fcntl(dst.fileno(), fcntl.F_GETFL) & os.O_DIRECT)
    return digest, count, sink.read_bytes(), positions, direct_left_on


@pytest.mark.parametrize(
    "size",
    [0, 1, 4095, 4096, CHUNK, CHUNK + 1, 7 * CHUNK + 123],
    ids=["empty", "one-byte", "under-a-block", "one-block", "one-chunk", "chunk-plus-one",
         "many-chunks-and-a-tail"],
)
def test_a_direct_copy_is_byte_exact_and_hashes_what_it_wrote(tmp_path, size):
    data = os.urandom(size)
    digest, count, written, positions, direct_left_on = _copy(tmp_path, data)
    assert written == data  # the zero padding of the last block is not part of the blob
    assert (digest, count) == (xxhash.xxh3_128(data).hexdigest(), size)
    assert positions == (0, 0)  # a fallback copy can start over from the beginning
    assert not direct_left_on


def test_a_chunk_that_direct_io_cannot_address_is_refused_before_writing(tmp_path):
    with pytest.raises(Unsupported):
        _copy(tmp_path, b"x" * 10_000, chunk=CHUNK + 1)
    assert (tmp_path / "sink.bin").read_bytes() == b""


@pytest.fixture
def direct_for_small_files(monkeypatch):
    monkeypatch.setattr(defaults, "STORE_DIRECT_MIN_BYTES", CHUNK)
    monkeypatch.setattr(defaults, "STORE_DIRECT_CHUNK_BYTES", CHUNK)


def test_large_files_captured_directly_restore_byte_for_byte(tmp_path, direct_for_small_files):
    live = tmp_path / "live"
    (live / "state").mkdir(parents=True)
    files = {"state/model.safetensors": os.urandom(5 * CHUNK + 77),
             "state/optimizer.pt": os.urandom(3 * CHUNK), "state/small.json": b"{}"}
    for rel, data in files.items():
        (live / rel).write_bytes(data)
    store = open_store(str(tmp_path / "store"))
    made = store.capture(str(live), ["state"], info=INFO)
    store.restore(made.id, str(tmp_path / "r"))
    for rel, data in files.items():
        assert (tmp_path / "r" / rel).read_bytes() == data
    report = store.verify()
    assert report.sound and report.files == 3
    blob = store.backend.path(keys.blob_key(xxhash.xxh3_128(files["state/optimizer.pt"]).hexdigest()))
    assert os.path.getsize(blob) == 3 * CHUNK


def test_a_file_system_that_refuses_direct_writes_gets_the_page_cache_copy(
    tmp_path, direct_for_small_files, monkeypatch
):
    def refused(*_args, **_kwargs):
        raise Unsupported("O_DIRECT: Invalid argument")

    monkeypatch.setattr(io_module, "direct_copy", refused)
    live = tmp_path / "live"
    (live / "state").mkdir(parents=True)
    data = os.urandom(4 * CHUNK + 5)
    (live / "state/model.safetensors").write_bytes(data)
    store = open_store(str(tmp_path / "store"))
    made = store.capture(str(live), ["state"], info=INFO)
    store.restore(made.id, str(tmp_path / "r"))
    assert (tmp_path / "r/state/model.safetensors").read_bytes() == data
