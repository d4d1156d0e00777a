"""The storage protocol under the store: a handful of operations on keys, over one fsspec adapter.

Keys are ``/``-separated strings relative to the store's root URL; ``pathlib`` never touches
them because it mangles ``s3://``. On ``file://`` the adapter takes the POSIX fast paths that
durability needs (temp name, fsync, atomic rename, synced folder); on object stores every
object is written by one PUT, which is atomic there.
"""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import tempfile
from dataclasses import dataclass
from typing import Any, BinaryIO

import fsspec
from fsspec.core import url_to_fs

from nodus._atomic import fsync_dir
from nodus.errors import UsageError
from nodus.store import keys

__all__ = ["Backend", "ObjectInfo"]


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    modified: float  # seconds since the epoch


class Backend:
    """One fsspec filesystem plus the root path every key is relative to."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        if url.startswith("/"):  # a bare absolute path means a file:// store
            url = "file://" + url
        if "://" not in url:
            raise UsageError(f"store URL {url!r}: give file:///abs/path, s3://bucket/prefix, ...")
        self.url = url.rstrip("/")
        try:
            self.fs, root = url_to_fs(self.url, **storage_options)
        except (ImportError, ValueError) as error:
            raise UsageError(f"store URL {url!r}: {error}") from error
        self.root = root.rstrip("/")
        self.is_local = "file" in _protocols(self.fs)
        if self.is_local:
            os.makedirs(self.root, exist_ok=True)

    # --- locations -------------------------------------------------------------------------

    def path(self, key: str) -> str:
        return f"{self.root}/{key}"

    def spool_dir(self) -> str:
        """Where capture writes a file's copy before it becomes a blob.

        On ``file://`` it is inside the store, on the same file system, so adopting the copy is a
        rename; elsewhere it is a local temp folder and adopting it is one upload.
        """
        if self.is_local:
            path = self.path(keys.TMP)
            os.makedirs(path, exist_ok=True)
            return path
        return tempfile.gettempdir()

    # --- objects -----------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        if self.is_local:
            return os.path.lexists(self.path(key))
        return self.fs.exists(self.path(key))

    def read(self, key: str) -> bytes:
        """Whole object; FileNotFoundError when absent."""
        if self.is_local:
            with open(self.path(key), "rb") as handle:
                return handle.read()
        return self.fs.cat_file(self.path(key))

    def open(self, key: str) -> BinaryIO:
        if self.is_local:
            return open(self.path(key), "rb", buffering=0)
        return self.fs.open(self.path(key), "rb", block_size=8 * 1024 * 1024)

    def write(self, key: str, data: bytes) -> None:
        """Write a whole object so that readers see all of it or nothing (replacing any)."""
        if not self.is_local:
            self.fs.pipe_file(self.path(key), data)
            return
        temp = os.path.join(self.spool_dir(), f"obj-{secrets.token_hex(8)}")
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        final = self.path(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(temp, final)
        fsync_dir(os.path.dirname(final))

    def adopt_blob(self, spool: str, key: str) -> bool:
        """Make the local file ``spool`` the blob ``key``; False if it already existed.

        A blob that exists is never rewritten. ``spool`` is gone afterwards either way.
        """
        try:
            if self.exists(key):
                return False
            if self.is_local:
                return self._link_blob(spool, key)
            self.fs.put_file(spool, self.path(key))
            return True
        finally:
            _remove_quietly(spool)

    def _link_blob(self, spool: str, key: str) -> bool:
        fd = os.open(spool, os.O_RDONLY)
        try:
            os.fsync(fd)  # durable before anything can name it
        finally:
            os.close(fd)
        final = self.path(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        try:
            # link() never replaces: if a concurrent capture stored the same blob first, keep it.
            os.link(spool, final)
        except FileExistsError:
            return False
        fsync_dir(os.path.dirname(final))
        return True

    def delete(self, key: str) -> None:
        try:
            if self.is_local:
                os.unlink(self.path(key))
            else:
                self.fs.rm_file(self.path(key))
        except FileNotFoundError:
            pass

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix`` (a folder key), with size and modification time."""
        if self.is_local:
            return self._list_local(prefix)
        base = self.path(prefix)
        self.fs.invalidate_cache()  # another process may have written since the last listing
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return []
        root = self.fs._strip_protocol(self.root)
        out = []
        for name, info in found.items():
            if info.get("type") == "directory":
                continue
            key = self.fs._strip_protocol(name)[len(root) + 1 :]
            out.append(ObjectInfo(key, int(info.get("size") or 0), _modified(info)))
        return out

    def _list_local(self, prefix: str) -> list[ObjectInfo]:
        out = []
        base = self.path(prefix)
        for folder, _dirs, files in os.walk(base):
            for name in files:
                full = os.path.join(folder, name)
                try:
                    stat = os.lstat(full)
                except FileNotFoundError:  # removed while listing
                    continue
                key = full[len(self.root) + 1 :].replace(os.sep, "/")
                out.append(ObjectInfo(key, stat.st_size, stat.st_mtime))
        return out


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _modified(info: dict[str, Any]) -> float:
    """Modification time from a listing entry; each fsspec backend names it differently."""
    for name in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(name)
        if value is None:
            continue
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=_dt.UTC)
            return value.timestamp()
        if isinstance(value, str):
            return _dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        return float(value)
    return 0.0


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
