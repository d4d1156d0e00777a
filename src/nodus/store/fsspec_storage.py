"""Object-store storage over one fsspec filesystem (``memory://``, ``s3://``, ``gs://``, …).

An object store makes every PUT atomic, so writing an object needs no temporary name; what it
does not give is a listing that includes another process's writes made since fsspec last looked,
so every listing drops fsspec's cache first.

A store that cannot be reached answers with its client's own exceptions (botocore's
``EndpointConnectionError``, aiohttp's, …); each operation turns them into
:class:`~nodus.errors.StoreError` naming the store, so callers handle one error, as for a local
store, and a missing object stays ``FileNotFoundError``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar, cast

import fsspec
from fsspec.callbacks import DEFAULT_CALLBACK, Callback

from nodus.errors import StoreError, StoreUnreachableError, in_words, redacted
from nodus.store import keys
from nodus.store.storage import ObjectInfo

__all__ = ["FsspecStorage"]

_T = TypeVar("_T")
_READ_BLOCK = 8 * 1024 * 1024  # large reads: a blob is streamed in few requests


def _reaching(method: Callable[..., _T]) -> Callable[..., _T]:
    """``method`` with its client's failures reported as StoreError (missing stays missing)."""

    @functools.wraps(method)
    def wrapper(self: FsspecStorage, *args: Any, **kwargs: Any) -> _T:
        try:
            return method(self, *args, **kwargs)
        except (FileNotFoundError, StoreError):
            raise
        except Exception as error:
            # the client's text may repeat the URL: its password is masked in both
            text = redacted(f"store {self.url} cannot be reached: {in_words(error)}")
            raise StoreUnreachableError(text) from error

    return wrapper


class FsspecStorage:
    """The :class:`~nodus.store.storage.Storage` of the folder ``root`` of an fsspec filesystem."""

    is_local = False

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.url = url
        self.fs = fs
        self.root = root

    def _path(self, key: str) -> str:
        return f"{self.root}/{keys.checked(key)}"

    @_reaching
    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))

    @_reaching
    def read(self, key: str) -> bytes:
        return bytes(self.fs.cat_file(self._path(key)))

    @_reaching
    def open(self, key: str) -> BinaryIO:
        return cast(BinaryIO, self.fs.open(self._path(key), "rb", block_size=_READ_BLOCK))

    @_reaching
    def write(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(key), data)

    @_reaching
    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key))

    @_reaching
    def list(self, prefix: str) -> list[ObjectInfo]:
        self.fs.invalidate_cache()  # another process may have written since the last listing
        try:
            found = self.fs.find(self._path(prefix), detail=True)
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

    def spool_path(self) -> str:
        fd, path = tempfile.mkstemp(prefix="nodus-blob-")
        os.close(fd)
        return path

    @_reaching
    def put_file(
        self, local_path: str, key: str, progress: Callable[[int], None] | None = None
    ) -> None:
        callback = _Progress(progress) if progress is not None else None
        self.fs.put_file(local_path, self._path(key), callback=callback or DEFAULT_CALLBACK)

    @_reaching
    def link_file(self, local_path: str, key: str, identity: tuple[int, ...]) -> bool | None:
        return None  # an object store has no links: the caller copies

    def local_file(self, key: str) -> str | None:
        return None  # no object is a file on this machine: a restore copies

    def adopt_file(self, local_path: str, key: str) -> bool:
        try:
            if self.exists(key):
                return False
            self.fs.put_file(local_path, self._path(key))
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local_path)


class _Progress(Callback):  # type: ignore[misc,unused-ignore]  # fsspec: untyped
    """fsspec's transfer callback, passed on as the number of bytes each step sent."""

    def __init__(self, progress: Callable[[int], None]) -> None:
        super().__init__()
        self._progress = progress

    def relative_update(self, inc: int = 1) -> None:
        super().relative_update(inc)
        self._progress(inc)

    def absolute_update(self, value: int) -> None:
        sent = value - (self.value or 0)
        super().absolute_update(value)
        if sent > 0:
            self._progress(sent)


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
