"""The Storage protocol itself, the same cases on every implementation.

``file://`` gets :class:`LocalStorage`; ``memory://`` and S3 (moto on loopback) get
:class:`FsspecStorage`. The store above relies on exactly what is checked here.
"""

from __future__ import annotations

import io
import os

import pytest

from nodus.errors import UsageError
from nodus.store import ObjectInfo, Storage, keys, open_storage
from nodus.store.fsspec_storage import FsspecStorage
from nodus.store.local_storage import LocalStorage


@pytest.fixture
def storage(store_url) -> Storage:
    return open_storage(store_url)


def _spooled(storage: Storage, data: bytes) -> str:
    path = storage.spool_path()
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def test_each_url_gets_its_implementation(storage, store_url):
    assert isinstance(storage, Storage)
    local = store_url.startswith("file://")
    assert isinstance(storage, LocalStorage if local else FsspecStorage)
    assert storage.is_local == local
    assert storage.url == store_url


def test_a_written_object_reads_back_whole_and_is_replaced_whole(storage):
    key = keys.manifest_key("ckpt_0123456789abcdef")
    assert not storage.exists(key)
    storage.write(key, b"first")
    assert storage.exists(key) and storage.read(key) == b"first"
    storage.write(key, b"second, longer")
    assert storage.read(key) == b"second, longer"
    with storage.open(key) as handle:
        assert handle.read() == b"second, longer"


def test_missing_objects_raise_file_not_found_and_delete_is_quiet(storage):
    key = keys.blob_key("0" * 32)
    with pytest.raises(FileNotFoundError):
        storage.read(key)
    with pytest.raises(FileNotFoundError):
        storage.open(key)
    storage.delete(key)  # nothing there: nothing happens
    storage.write(key, b"x")
    storage.delete(key)
    assert not storage.exists(key)


def test_list_gives_relative_keys_under_a_prefix_with_sizes(storage):
    digests = ["ab" + "1" * 30, "ab" + "2" * 30, "cd" + "3" * 30]
    for index, digest in enumerate(digests):
        storage.write(keys.blob_key(digest), b"z" * (index + 1))
    storage.write(keys.manifest_key("ckpt_0123456789abcdef"), b"{}")

    found = storage.list(keys.BLOBS)
    assert all(isinstance(info, ObjectInfo) for info in found)
    assert sorted((info.key, info.size) for info in found) == [
        (keys.blob_key(digest), index + 1) for index, digest in enumerate(digests)
    ]
    assert all(info.modified > 0 for info in found)
    assert [keys.hash_of_blob_key(info.key) for info in found if info.key.endswith("1")] == [
        digests[0]
    ]
    assert storage.list(keys.TOMBSTONES) == []  # a folder nothing was written to


def test_an_adopted_file_becomes_the_object_and_an_existing_one_is_never_replaced(storage):
    key = keys.blob_key("ef" + "4" * 30)
    first = _spooled(storage, b"stored once")
    assert storage.adopt_file(first, key) is True
    assert storage.read(key) == b"stored once"
    assert not os.path.exists(first)  # the spool is gone once adopted

    second = _spooled(storage, b"a different copy")
    assert storage.adopt_file(second, key) is False
    assert storage.read(key) == b"stored once"
    assert not os.path.exists(second)


def test_local_writes_leave_no_temporary_names_and_open_gives_a_real_file(tmp_path):
    storage = open_storage(str(tmp_path / "store"))  # a bare absolute path is a file:// store
    assert isinstance(storage, LocalStorage) and storage.url == "file://" + str(tmp_path / "store")
    storage.write(keys.sweep_key(keys.new_sweep_token()), b"{}")
    spool = _spooled(storage, b"blob")
    assert os.path.dirname(spool) == storage.path(keys.TMP)  # same disk: adopting is a link
    storage.adopt_file(spool, keys.blob_key("9" * 32))
    assert os.listdir(storage.path(keys.TMP)) == []
    with storage.open(keys.blob_key("9" * 32)) as handle:
        assert isinstance(handle, io.FileIO)  # what the kernel and direct-I/O copies need


@pytest.mark.parametrize("url", ["not-a-url", "relative/path"])
def test_an_unusable_url_is_a_usage_error(url):
    with pytest.raises(UsageError, match="store URL"):
        open_storage(url)
