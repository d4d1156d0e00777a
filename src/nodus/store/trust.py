"""Blobs this store object has hashed itself, remembered by the state of their file then.

Every restore verifies what it lays out. Hashing a blob again that this process hashed when it
stored it (or when an earlier restore read it) proves nothing new as long as the blob's file is
the same one, unchanged and unwritable: same inode, size and mtime as when it was hashed, and no
write permission. A write through any name of the inode moves its mtime, so such a blob is
read and hashed again before it is trusted; a new process trusts nothing until it has hashed it.
"""

from __future__ import annotations

import os
import stat

__all__ = ["VerifiedBlobs", "read_only"]

Identity = tuple[int, int, int, int]  # size, mtime_ns, inode, device


def read_only(info: os.stat_result) -> bool:
    return stat.S_IMODE(info.st_mode) & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) == 0


class VerifiedBlobs:
    """Digest -> the identity of the blob's file when its bytes were last hashed here."""

    def __init__(self) -> None:
        self._known: dict[str, Identity] = {}

    def note(self, digest: str, info: os.stat_result) -> None:
        """The file ``info`` describes was just hashed to ``digest`` (and is a blob's)."""
        if read_only(info):
            self._known[digest] = _identity(info)

    def trusts(self, digest: str, info: os.stat_result) -> bool:
        """Whether the blob's file, as ``info`` describes it now, is the one hashed here."""
        return read_only(info) and self._known.get(digest) == _identity(info)


def _identity(info: os.stat_result) -> Identity:
    return (info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)
