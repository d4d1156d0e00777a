"""``file://`` storage: a folder on this machine, written with the POSIX fast paths.

Every folder it creates is 0700 and every object it writes 0600, whatever the umask; a blob
keeps the read-only mode of the file it holds (a restore links it into a working copy as that
file), so it is the folders that keep other users out (docs/security.md, "File modes").

A snapshot must survive a crash of the machine, not only of the process, so every object is
written under a temporary name in ``tmp/``, fsynced, and renamed (or, for a blob, linked) into
place, and the folder that gained it is fsynced. Every folder it makes (the root and its
missing parents, ``blobs/<xx>/``, ``snapshots/...``, ``runs/<run>/``, ``tmp/``) is made by
``private_folder``: fsynced into its parent before the first object is published inside, so
a committed manifest never survives a power loss that loses the folder of its blobs. ``tmp/``
lies inside the store so that the rename never crosses file systems; whatever a killed writer
leaves there is swept by blob GC.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable
from typing import BinaryIO

from nodus._atomic import fsync_dir, open_private, private_folder
from nodus.store import keys
from nodus.store.storage import ObjectInfo

__all__ = ["LocalStorage"]


class LocalStorage:
    """The :class:`~nodus.store.storage.Storage` of a store folder at ``root``."""

    is_local = True

    def __init__(self, url: str, root: str) -> None:
        self.url = url
        self.root = root
        self._dev: int | None = None  # the store's file system, for hard links into it
        private_folder(self.root)

    def path(self, key: str) -> str:
        """The file that holds ``key`` (tests and tools that look at the disk use it too).

        Keys are built by :mod:`nodus.store.keys` from checked parts; one that could still
        name something outside the root (``..``, absolute, empty parts) is refused here too.
        """
        return f"{self.root}/{keys.checked(key)}"

    def exists(self, key: str) -> bool:
        return os.path.lexists(self.path(key))

    def read(self, key: str) -> bytes:
        with self.open(key) as handle:
            return handle.read()

    def open(self, key: str) -> BinaryIO:
        # Unbuffered: a real file descriptor the kernel and direct-I/O copies can take. Only a
        # regular file is an object: a link (to a file outside, to /dev/zero) or a device put
        # in its place is read as no object at all, never followed.
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise FileNotFoundError(errno.ENOENT, "a symlink, not an object", path) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileNotFoundError(errno.ENOENT, "not a regular file, not an object", path)
        return os.fdopen(fd, "rb", buffering=0)

    def write(self, key: str, data: bytes) -> None:
        temp = self._temp("obj")
        with open_private(temp) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        final = self.path(key)
        private_folder(os.path.dirname(final))
        os.replace(temp, final)
        fsync_dir(os.path.dirname(final))

    def delete(self, key: str) -> None:
        try:
            os.unlink(self.path(key))
        except FileNotFoundError:
            return
        # A manifest's removal is made durable before the next step of a deletion removes its
        # tombstones: one that came back after a power cut without them would name freed
        # blobs. Anything else that came back would only be garbage for the next gc.
        if key.startswith(keys.SNAPSHOTS + "/"):
            fsync_dir(os.path.dirname(self.path(key)))

    def list(self, prefix: str) -> list[ObjectInfo]:
        out = []
        for folder, _dirs, files in os.walk(self.path(prefix)):
            for name in files:
                full = os.path.join(folder, name)
                try:
                    stat = os.lstat(full)
                except FileNotFoundError:  # removed while listing
                    continue
                key = full[len(self.root) + 1 :].replace(os.sep, "/")
                out.append(ObjectInfo(key, stat.st_size, stat.st_mtime))
        return out

    def spool_path(self) -> str:
        return self._temp("blob")

    def adopt_file(self, local_path: str, key: str) -> bool:
        try:
            return not self.exists(key) and self._link(local_path, key)
        finally:
            _remove_quietly(local_path)

    def _link(self, local_path: str, key: str) -> bool:
        fd = os.open(local_path, os.O_RDONLY)
        try:
            os.fsync(fd)  # durable before anything can name it
        finally:
            os.close(fd)
        final = self.path(key)
        private_folder(os.path.dirname(final))
        try:
            # link() never replaces: if a concurrent capture stored the same blob first, keep it.
            os.link(local_path, final)
        except FileExistsError:
            return False
        fsync_dir(os.path.dirname(final))
        return True

    def link_file(self, local_path: str, key: str, identity: tuple[int, ...]) -> bool | None:
        if self.exists(key):
            return False
        try:
            info = os.stat(local_path, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if info.st_dev != self._device():
            return None  # another file system: no link can reach it
        # Read-only before anything names it: the blob and the live file share this inode.
        os.chmod(local_path, stat.S_IMODE(info.st_mode) & ~_WRITABLE, follow_symlinks=False)
        fd = os.open(local_path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            if _identity(os.fstat(fd)) != identity:
                return None  # written or replaced since it was hashed
            os.fsync(fd)  # durable before the blob's name (already so when the writer synced)
        finally:
            os.close(fd)
        final = self.path(key)
        private_folder(os.path.dirname(final))
        try:
            os.link(local_path, final, follow_symlinks=False)  # never replaces
        except FileExistsError:
            return False
        except OSError as error:
            if error.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                return None  # links refused here: the caller copies
            raise
        if _identity(os.stat(final)) != identity:  # the path was replaced before the link
            os.unlink(final)
            return None
        fsync_dir(os.path.dirname(final))
        return True

    def local_file(self, key: str) -> str | None:
        return self.path(key)

    def _device(self) -> int:
        if self._dev is None:
            self._dev = os.stat(self.root).st_dev
        return self._dev

    def put_file(
        self, local_path: str, key: str, progress: Callable[[int], None] | None = None
    ) -> None:
        temp = self._temp("obj")
        with open(local_path, "rb") as source, open_private(temp) as handle:
            shutil.copyfileobj(source, handle)
            handle.flush()
            os.fsync(handle.fileno())
        final = self.path(key)
        private_folder(os.path.dirname(final))
        os.replace(temp, final)
        fsync_dir(os.path.dirname(final))
        if progress is not None:
            progress(os.path.getsize(final))

    def _temp(self, purpose: str) -> str:
        path = self.path(keys.temp_key(purpose))
        private_folder(os.path.dirname(path))
        return path


_WRITABLE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _identity(info: os.stat_result) -> tuple[int, ...]:
    """What :meth:`LocalStorage.link_file` compares: size, mtime, inode and device."""
    return (info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
