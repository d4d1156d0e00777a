"""Verified restore: every byte checked against its hash, no path allowed out of the target.

Restore works in two phases. Files are first laid out under temporary names next to their final
place, each verified; only when every one matched are they renamed into place and the symlinks
made. A damaged snapshot therefore leaves the target as it was, and the caller can fall back to
the next newest snapshot. Each file gets its captured permission bits and (when the manifest
recorded it) modification time back.

A file's bytes come from the first of these that applies (:class:`Sources` says which may):

1. ``reuse``: the file at the same path in a folder the caller set aside (the previous
   attempt's working copy), moved here by a rename when it hashes to the entry; when it is the
   blob's own inode (an integration's checkpoint, stored by a hard link) it is trusted as the
   blob is, below. One that this store object's captures hashed at this very path (``known``,
   the captures' own cache of file states: same size, mtime, ctime, inode and device, and not
   modified within a timestamp tick of being read) is not hashed again: its state is the one
   hashed, as a capture of the unchanged file would take it.
2. ``link``: under the folders named there (files that are never written in place), a hard
   link to the blob itself when the store is a folder on the same file system and the blob's
   read-only mode and mtime are the entry's: no byte is written. The blob is hashed through the
   link unless ``trusted`` says this process hashed that very file, unchanged, before.
3. A copy from the blob, hashed as it is written.

A linked or reused blob file is shared with the store, so it keeps the blob's mode (the entry's
without write permission) and is never written through; nothing is trusted without a hash
taken by this process of the same, unchanged, unwritable file (:mod:`nodus.store.trust`).

:func:`layered` and :func:`write_layers` lay several snapshots out one over another, writing
only the paths asked for: a stage's working copy whose other files the runner keeps
(:mod:`nodus.runner.workspace.layout`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from nodus.errors import SnapshotDamagedError, StoreError, UnsafePathError, UsageError
from nodus.store import keys
from nodus.store._io import copy_hashing
from nodus.store.live_folder import FileCache, file_signature
from nodus.store.manifest import PERMISSIONS, FileEntry, Manifest
from nodus.store.names import link_problem, path_problem
from nodus.store.storage import Storage
from nodus.store.trust import VerifiedBlobs, read_only

__all__ = [
    "Layers",
    "Sources",
    "holds_bytes",
    "layered",
    "restore",
    "unsafe_reason",
    "write_layers",
    "write_verified",
]

Layers = dict[str, tuple[str, FileEntry]]
"""Snapshots laid out one over another: each path with the id of the snapshot that has it."""


@dataclass(frozen=True)
class Sources:
    """Where a restore may find a file's bytes without writing them (see the module's doc)."""

    trusted: VerifiedBlobs
    reuse: str | None = None  # a folder set aside, whose files may be moved in once verified
    link: tuple[str, ...] = ()  # folders (relative, "/"-separated) whose files may be links
    known: FileCache | None = None  # files captured here, by their path at the target


def unsafe_reason(entry: FileEntry) -> str | None:
    """Why a manifest entry could escape the folder it is restored into; None if it cannot.

    The rule of :mod:`nodus.store.names`, which captures and manifest reads apply too."""
    problem = path_problem(entry.path)
    if problem is None and entry.target is not None:
        problem = link_problem(entry.path, entry.target)
    return problem


def restore(
    storage: Storage,
    manifest: Manifest,
    target: str,
    kinds: Sequence[str] | None = None,
    overlay: bool = False,
    sources: Sources | None = None,
) -> None:
    entries = manifest.held_files(tuple(kinds) if kinds is not None else None)
    pairs = [(entry, entry.path) for entry in entries]
    _refuse_unsafe(manifest.id, pairs)  # before the target is made: a refusal creates nothing
    _prepare_target(target, overlay)
    write_verified(storage, manifest.id, pairs, target, sources=sources)


def layered(manifests: Sequence[Manifest]) -> Layers | None:
    """The files ``manifests`` lay out, each restored over the ones before (a later one's
    entry replaces an earlier one's at its path), as :func:`restore` with ``overlay`` would.

    None where that restore would refuse: a path of one snapshot that is a folder of another
    (a restore in that order meets a file or a folder in the way).
    """
    files: Layers = {}
    for manifest in manifests:
        for entry in manifest.held_files():
            files[entry.path] = (manifest.id, entry)
    folders = {path.rsplit("/", i)[0] for path in files for i in range(1, path.count("/") + 1)}
    return None if folders & files.keys() else files


def write_layers(storage: Storage, files: Layers, paths: Sequence[str], target: str) -> None:
    """Write the ``paths`` of ``files`` under ``target`` (which holds the rest of them), every
    file verified as :func:`write_verified` does; nothing of a snapshot lands unless all of
    its files there verified."""
    by_snapshot: dict[str, list[tuple[FileEntry, str]]] = {}
    for path in paths:
        snapshot_id, entry = files[path]
        by_snapshot.setdefault(snapshot_id, []).append((entry, path))
    for snapshot_id, pairs in by_snapshot.items():
        write_verified(storage, snapshot_id, pairs, target)


def write_verified(
    storage: Storage,
    snapshot_id: str,
    pairs: Sequence[tuple[FileEntry, str]],
    target: str,
    wrap: Callable[[BinaryIO], Any] | None = None,
    sources: Sources | None = None,
) -> None:
    """Write each ``(entry, destination)`` under ``target``; nothing lands unless all verify.

    ``destination`` is a relative path checked like a manifest path; ``wrap`` may wrap each
    file being written (a progress counter) and then the plain, non-kernel copy is used.
    ``sources``: where the bytes may come from without a copy (the module's doc).

    Symlinks are made after every file verified and before any is renamed into place, and
    each is then resolved as the system would (chains included): one that leads out of the
    target is removed with the others and refused (UnsafePathError), leaving the files unmoved.
    """
    _refuse_unsafe(snapshot_id, pairs)
    root = os.path.realpath(target)
    folders: set[str] = set()  # folders already made or checked under root
    staged: list[tuple[str, str, FileEntry, bool]] = []
    try:
        for entry, dest in pairs:
            if not entry.is_link:
                final = _checked_destination(root, dest, folders)
                temp = _temp_next_to(final)
                shared = _without_copy(storage, snapshot_id, entry, dest, temp, sources, target)
                if shared is None:
                    _stage(storage, snapshot_id, entry, temp, wrap)
                staged.append((temp, final, entry, bool(shared)))
        links = [(d, e.target) for e, d in pairs if e.target is not None]
        _make_links(snapshot_id, root, links, folders)
    except BaseException:
        for temp, _final, _entry, _shared in staged:
            _remove(temp)
        raise
    for temp, final, entry, shared in staged:
        os.replace(temp, final)
        if not shared:  # a blob's own file already has the entry's time and read-only mode
            os.chmod(final, entry.mode & PERMISSIONS)  # masked when read too: never setuid
            if entry.mtime_ns is not None:
                # The captured time, so whatever keys on mtimes (a `datasets` fingerprint of a
                # local file, make) sees the same file in every attempt.
                os.utime(final, ns=(entry.mtime_ns, entry.mtime_ns))


def _refuse_unsafe(snapshot_id: str, pairs: Sequence[tuple[FileEntry, str]]) -> None:
    """Refuse a destination the name rule refuses, or one under a link being laid out."""
    link_paths = {dest for entry, dest in pairs if entry.is_link}
    for entry, dest in pairs:
        reason = unsafe_reason(entry) or path_problem(dest)
        if reason is None and entry.is_link:
            reason = link_problem(dest, entry.target)  # a download moves links up
        parents = dest.split("/")[:-1]
        if reason is None and any(
            "/".join(parents[: i + 1]) in link_paths for i in range(len(parents))
        ):
            reason = "lies under a symlink of the same snapshot"
        if reason is not None:
            shown = entry.path if dest == entry.path else f"{entry.path} (as {dest})"
            raise UnsafePathError(
                f"snapshot {snapshot_id}: path {shown!r} {reason}; refusing to restore it"
            )


def _make_links(
    snapshot_id: str, root: str, links: list[tuple[str, str]], folders: set[str]
) -> None:
    """Make every link (destination, its target), then resolve each: any that leads out of
    ``root`` refuses them all."""
    made: list[str] = []
    try:
        for dest, link_target in links:
            final = _checked_destination(root, dest, folders)
            _link(link_target, final)
            made.append(final)
        for (dest, link_target), final in zip(links, made, strict=True):
            resolved = os.path.realpath(final)
            if not _within(resolved, root):
                raise UnsafePathError(
                    f"snapshot {snapshot_id}: symlink {dest!r} -> {link_target!r} resolves "
                    f"to {resolved}, outside {root}; refusing to restore it"
                )
    except BaseException:
        for final in made:
            _remove(final)
        raise


def _prepare_target(target: str, overlay: bool) -> None:
    os.makedirs(target, exist_ok=True)
    if not overlay and os.listdir(target):
        raise UsageError(f"restore target {target} is not empty (restore needs an empty folder)")


def _temp_next_to(final: str) -> str:
    return os.path.join(os.path.dirname(final), f".nodus-restore-{os.urandom(6).hex()}")


def _without_copy(
    storage: Storage,
    snapshot_id: str,
    entry: FileEntry,
    dest: str,
    temp: str,
    sources: Sources | None,
    target: str,
) -> bool | None:
    """Lay the entry out at ``temp`` from a verified file already on this disk, if one is.

    True: ``temp`` is the blob's own file (shared with the store); False: a verified file of
    its own; None: nothing here serves, copy from the blob. A linked blob that does not hash
    to its name is damage (SnapshotDamagedError), as a copy of it would be.
    """
    if sources is None:
        return None
    blob_path = storage.local_file(keys.blob_key(entry.hash))
    if blob_path is None:
        return None  # the store is not on this disk: nothing here is its blob
    blob = _stat(blob_path)
    if sources.reuse is not None and blob is not None:
        at_target = os.path.join(target, *dest.split("/"))
        reused = _reuse(snapshot_id, sources, dest, at_target, entry, temp, blob_path, blob)
        if reused is not None:
            return reused
    linkable = any(dest.startswith(f"{folder}/") for folder in sources.link)
    if not linkable or blob is None or not _fits(entry, blob):
        return None
    try:
        os.link(blob_path, temp, follow_symlinks=False)
    except OSError as error:
        if error.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOENT):
            return None  # another file system, links refused, or the blob just went: copy
        raise
    if _verified(temp, entry, blob, sources.trusted):
        return True
    _remove(temp)
    raise SnapshotDamagedError(
        f"snapshot {snapshot_id}: {entry.path}: contents do not match the manifest "
        f"(blob {entry.hash} is altered)"
    )


def _reuse(
    snapshot_id: str,
    sources: Sources,
    dest: str,
    at_target: str,
    entry: FileEntry,
    temp: str,
    blob_path: str,
    blob: os.stat_result,
) -> bool | None:
    """Move the file at ``dest`` under the set-aside folder to ``temp`` when it holds the
    entry's bytes; the blob is verified too (trusted, or hashed), so a damaged snapshot is
    refused as a copy from it would be. ``at_target``: where the file was when captured."""
    reuse, trusted = sources.reuse, sources.trusted
    assert reuse is not None
    found = os.path.join(reuse, *dest.split("/"))
    try:
        info = os.lstat(found)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size != entry.size:
        return None
    if not _inside(os.path.dirname(found), reuse):
        return None  # a symlinked folder of the old copy: never move a file from elsewhere
    shared = (info.st_ino, info.st_dev) == (blob.st_ino, blob.st_dev)
    if shared and not _fits(entry, info):
        return None  # the blob's file, but its time or mode is not this entry's
    if not shared and not _verified(blob_path, entry, blob, trusted):
        # The snapshot is damaged even though this file is sound: another machine, or a
        # later attempt without it, could not restore it (the caller falls back).
        raise SnapshotDamagedError(
            f"snapshot {snapshot_id}: {entry.path}: contents do not match the manifest "
            f"(blob {entry.hash} is altered)"
        )
    # Known before the rename, which moves the file's ctime.
    known = sources.known is not None and sources.known.get(at_target, file_signature(info))
    os.rename(found, temp)  # the set-aside folder is the caller's, on the target's disk
    if not shared and known == entry.hash and _unmoved(temp, info):
        return False
    if _verified(temp, entry, blob if shared else None, trusted):
        return shared
    _remove(temp)
    return None


def _unmoved(path: str, before: os.stat_result) -> bool:
    """The file renamed to ``path`` is the one ``before`` describes, unwritten since."""
    now = os.lstat(path)
    return (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) == (
        before.st_ino,
        before.st_dev,
        before.st_size,
        before.st_mtime_ns,
    )


def _inside(folder: str, root: str) -> bool:
    real, real_root = os.path.realpath(folder), os.path.realpath(root)
    return real == real_root or real.startswith(real_root + os.sep)


def _fits(entry: FileEntry, info: os.stat_result) -> bool:
    """A blob's file can stand for the entry: read-only, the entry's mode and mtime."""
    mode = stat.S_IMODE(info.st_mode)
    right_mode = read_only(info) and mode == entry.mode & ~0o222
    return right_mode and entry.mtime_ns in (None, info.st_mtime_ns)


def _verified(
    path: str, entry: FileEntry, blob: os.stat_result | None, trusted: VerifiedBlobs
) -> bool:
    """Whether the file at ``path`` holds the entry's bytes; ``blob``: it is that blob's file.

    A blob's file this process hashed before, unchanged and unwritable since, needs no read.
    Only a regular file is read, never through a link, and never past the entry's size.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return False  # a link where a blob's file belongs: not this entry's bytes
        raise
    with os.fdopen(fd, "rb", buffering=0) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return False
        is_blob = blob is not None and (info.st_ino, info.st_dev) == (blob.st_ino, blob.st_dev)
        if is_blob and trusted.trusts(entry.hash, info):
            return True
        digest, size = copy_hashing(handle, None, limit=entry.size + 1)
        unchanged = os.fstat(handle.fileno()).st_mtime_ns == info.st_mtime_ns
    if digest != entry.hash or size != entry.size or not unchanged:
        return False
    if is_blob:
        trusted.note(entry.hash, info)
    return True


def holds_bytes(path: str, entry: FileEntry) -> bool:
    """Whether the regular file at ``path`` (never followed through a link) holds ``entry``'s
    bytes, read no further than one byte past its size: a program that wrote back what was
    restored for it (:mod:`nodus.runner.capture.capturer`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False
        digest, size = copy_hashing(handle, None, limit=entry.size + 1)
    return (digest, size) == (entry.hash, entry.size)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _stage(
    storage: Storage,
    snapshot_id: str,
    entry: FileEntry,
    temp: str,
    wrap: Callable[[BinaryIO], Any] | None,
) -> None:
    """Copy one blob to ``temp`` (next to its final place), checking its hash."""
    try:
        with (
            storage.open(keys.blob_key(entry.hash)) as source,
            open(temp, "w+b", buffering=0) as sink,
        ):
            # Large blobs: past the page cache.
            direct: Literal["read"] | None = "read" if storage.is_local else None
            # At most one byte more than the entry's size is read: a blob that is longer (or
            # endless, as a device would be) is damage as soon as that byte is seen.
            digest, size = copy_hashing(
                source, wrap(sink) if wrap else sink, direct=direct, limit=entry.size + 1
            )
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


def _checked_destination(root: str, path: str, folders: set[str]) -> str:
    """The file's place under ``root``; its folders are made one at a time, each checked
    first, so a folder that leads out through a symlink is refused before anything is made
    beyond it (``folders``: those already checked)."""
    parts = path.split("/")
    here = root
    for part in parts[:-1]:
        here = os.path.join(here, part)
        if here in folders:
            continue
        real = os.path.realpath(here)
        if not _within(real, root):
            raise UnsafePathError(
                f"restoring {path!r} would pass through a symlink out of the target "
                f"({here} resolves to {real}); refusing"
            )
        with contextlib.suppress(FileExistsError):
            os.mkdir(here)
        folders.add(here)
    final = os.path.join(root, *parts)
    if os.path.isdir(final) and not os.path.islink(final):
        raise StoreError(f"cannot restore file {path!r}: a folder of that name is in the way")
    return final


def _within(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _link(link_target: str, final: str) -> None:
    if os.path.lexists(final):
        os.unlink(final)  # overlay: the snapshot's link replaces what the source copy had
    os.symlink(link_target, final)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
