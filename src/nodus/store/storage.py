"""The storage protocol under the store: a handful of operations on ``str`` keys.

Keys are ``/``-separated strings relative to the store's root URL (built by
:mod:`nodus.store.keys`); ``pathlib`` never touches them because it mangles ``s3://``. The store
asks nothing more of a storage than what is below, so two implementations cover every URL:

- :class:`~nodus.store.local_storage.LocalStorage` (``file://``) takes the POSIX fast paths that
  durability and speed need: temp name, fsync, atomic rename or link, synced folder, and files
  the direct-I/O copies can open.
- :class:`~nodus.store.fsspec_storage.FsspecStorage` (``memory://``, ``s3://``, ``gs://``, …)
  writes every object with one PUT, which is atomic there.

:func:`nodus.store.opening.open_storage` picks one for a URL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

__all__ = ["ObjectInfo", "Storage"]


@dataclass(frozen=True)
class ObjectInfo:
    """One object found by :meth:`Storage.list`."""

    key: str
    size: int
    modified: float  # seconds since the epoch


@runtime_checkable
class Storage(Protocol):
    """What the snapshot store needs from where it keeps its objects."""

    @property
    def url(self) -> str:
        """The store's URL, as given (a bare absolute path becomes ``file://…``)."""
        ...

    @property
    def is_local(self) -> bool:
        """Keys are files on this machine: large copies in and out may bypass the page cache."""
        ...

    def read(self, key: str) -> bytes:
        """The whole object; FileNotFoundError when there is none."""
        ...

    def open(self, key: str) -> BinaryIO:
        """The object for streaming reads; FileNotFoundError when there is none.

        A local storage gives a real unbuffered file, so kernel and direct copies can take it.
        """
        ...

    def write(self, key: str, data: bytes) -> None:
        """Write a whole object, replacing any: readers see all of it or none, even on a crash."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object under the folder key ``prefix`` (none when it does not exist)."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object; nothing happens when there is none."""
        ...

    def spool_path(self) -> str:
        """A fresh path on this machine for a file that :meth:`adopt_file` will take in.

        Locally it lies inside the store, on the same file system, so adopting it is a link;
        elsewhere it is in the temp folder and adopting it is one upload.
        """
        ...

    def adopt_file(self, local_path: str, key: str) -> bool:
        """Make the local file the object ``key`` unless one exists; False when it did.

        An existing object is never replaced (a blob is written once), and the local file is
        gone afterwards either way. Locally the file is durable before ``key`` names it.
        """
        ...

    def link_file(self, local_path: str, key: str, identity: tuple[int, ...]) -> bool | None:
        """Make a local file that is never modified in place the object ``key``, by a hard link.

        ``identity`` is the (size, mtime_ns, inode, device) of the file the caller hashed. The
        file is left in place, made read-only (the object and the file are then one inode, so
        neither may ever be written through). True: linked; False: an object existed (kept);
        None: not possible here (a remote storage, another file system, the file replaced
        meanwhile): copy it instead.
        """
        ...

    def local_file(self, key: str) -> str | None:
        """The file on this machine that holds the object ``key``, so a restore may link to it
        instead of copying it; None where objects are not local files (a remote storage).

        The file may be missing (a missing object). Nothing may ever write through this path.
        """
        ...

    def put_file(
        self, local_path: str, key: str, progress: Callable[[int], None] | None = None
    ) -> None:
        """Copy the local file to the object ``key`` (replacing any), leaving the file in place.

        Readers see the whole object or none. ``progress(n)`` hears of each ``n`` bytes sent,
        so an upload of one large blob can be followed (the background uploader's queue).
        """
        ...
