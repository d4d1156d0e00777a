"""Verified restore: every byte checked against its hash, no path allowed out of the target.

Restore works in two phases. Files are first written under temporary names next to their final
place, each hashed as it is copied; only when every one matched are they renamed into place and
the symlinks made. A damaged snapshot therefore leaves the target as it was, and the caller can
fall back to the next newest snapshot. Each file gets its captured permission bits and (when the
manifest recorded it) modification time back.
"""

from __future__ import annotations

import os
import posixpath
import secrets
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from nodus.errors import SnapshotDamagedError, StoreError, UnsafePathError, UsageError
from nodus.store import keys
from nodus.store._io import copy_hashing
from nodus.store.manifest import FileEntry, Manifest
from nodus.store.storage import Storage

__all__ = ["restore", "unsafe_reason", "write_verified"]


def unsafe_reason(entry: FileEntry) -> str | None:
    """Why a manifest entry could escape the folder it is restored into; None if it cannot."""
    path = entry.path
    if not path or "\x00" in path or "\\" in path:
        return "is empty or holds a NUL or backslash"
    if posixpath.isabs(path) or os.path.isabs(path):
        return "is absolute"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "has an empty, '.' or '..' component"
    if entry.target is not None:
        if posixpath.isabs(entry.target):
            return f"is a symlink to the absolute path {entry.target!r}"
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), entry.target))
        if resolved == ".." or resolved.startswith("../"):
            return f"is a symlink to {entry.target!r}, outside the snapshot"
    return None


def restore(
    storage: Storage,
    manifest: Manifest,
    target: str,
    kinds: Sequence[str] | None = None,
    overlay: bool = False,
) -> None:
    entries = manifest.held_files(tuple(kinds) if kinds is not None else None)
    _refuse_unsafe(manifest, entries)
    _prepare_target(target, overlay)
    write_verified(storage, manifest.id, [(entry, entry.path) for entry in entries], target)


def write_verified(
    storage: Storage,
    snapshot_id: str,
    pairs: Sequence[tuple[FileEntry, str]],
    target: str,
    wrap: Callable[[BinaryIO], Any] | None = None,
) -> None:
    """Write each ``(entry, destination)`` under ``target``; nothing lands unless all verify.

    ``destination`` is a relative path checked like a manifest path; ``wrap`` may wrap each
    file being written (a progress counter) and then the plain, non-kernel copy is used.
    """
    root = os.path.realpath(target)
    staged: list[tuple[str, str, FileEntry]] = []
    try:
        for entry, dest in pairs:
            if not entry.is_link:
                final = _checked_destination(root, dest)
                staged.append(_stage(storage, snapshot_id, entry, final, wrap))
    except BaseException:
        for temp, _final, _entry in staged:
            _remove(temp)
        raise
    for temp, final, entry in staged:
        os.replace(temp, final)
        os.chmod(final, entry.mode)
        if entry.mtime_ns is not None:
            # The captured time, so whatever keys on mtimes (a `datasets` fingerprint of a
            # local file, make) sees the same file in every attempt.
            os.utime(final, ns=(entry.mtime_ns, entry.mtime_ns))
    for entry, dest in pairs:
        if entry.is_link:
            _link(entry.target, _checked_destination(root, dest))


def _refuse_unsafe(manifest: Manifest, entries: list[FileEntry]) -> None:
    link_paths = {entry.path for entry in entries if entry.is_link}
    for entry in entries:
        reason = unsafe_reason(entry)
        parents = entry.path.split("/")[:-1]
        if reason is None and any(
            "/".join(parents[: i + 1]) in link_paths for i in range(len(parents))
        ):
            reason = "lies under a symlink of the same snapshot"
        if reason is not None:
            raise UnsafePathError(
                f"snapshot {manifest.id}: path {entry.path!r} {reason}; refusing to restore it"
            )


def _prepare_target(target: str, overlay: bool) -> None:
    os.makedirs(target, exist_ok=True)
    if not overlay and os.listdir(target):
        raise UsageError(f"restore target {target} is not empty (restore needs an empty folder)")


def _stage(
    storage: Storage, snapshot_id: str, entry: FileEntry, final: str, wrap
) -> tuple[str, str, FileEntry]:
    """Copy one blob next to its final place under a temporary name, checking its hash."""
    temp = os.path.join(os.path.dirname(final), f".nodus-restore-{secrets.token_hex(6)}")
    try:
        with (
            storage.open(keys.blob_key(entry.hash)) as source,
            open(temp, "w+b", buffering=0) as sink,
        ):
            direct = "read" if storage.is_local else None  # large blobs: past the page cache
            digest, size = copy_hashing(source, wrap(sink) if wrap else sink, direct=direct)
    except FileNotFoundError as error:
        _remove(temp)
        if error.filename == temp:
            raise
        raise SnapshotDamagedError(
            f"snapshot {snapshot_id}: {entry.path}: its contents (blob {entry.hash}) are missing"
        ) from None
    except BaseException:  # a failed read or write (EIO, a full disk): leave nothing behind
        _remove(temp)
        raise
    if digest != entry.hash or size != entry.size:
        _remove(temp)
        raise SnapshotDamagedError(
            f"snapshot {snapshot_id}: {entry.path}: contents do not match the manifest "
            f"(expected xxh3-128 {entry.hash}, {entry.size} bytes; found {digest}, {size} bytes)"
        )
    return temp, final, entry


def _checked_destination(root: str, path: str) -> str:
    """The file's place under ``root``, refusing parents that lead out of it through a symlink."""
    final = os.path.join(root, *path.split("/"))
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    real_parent = os.path.realpath(parent)
    if real_parent != root and not real_parent.startswith(root + os.sep):
        raise UnsafePathError(
            f"restoring {path!r} would pass through a symlink out of the target "
            f"(its folder resolves to {real_parent}); refusing"
        )
    if os.path.isdir(final) and not os.path.islink(final):
        raise StoreError(f"cannot restore file {path!r}: a folder of that name is in the way")
    return final


def _link(link_target: str, final: str) -> None:
    if os.path.lexists(final):
        os.unlink(final)  # overlay: the snapshot's link replaces what the source copy had
    os.symlink(link_target, final)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
