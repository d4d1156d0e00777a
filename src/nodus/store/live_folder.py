"""Consistent capture of a live folder: what to take, and reading each file as one real state.

The program keeps writing while nodus captures, so every file is read through one open
descriptor and compared before and after (size, mtime_ns, ctime_ns, inode at its path): a
file modified or replaced during the copy is read again. The copy is the blob's future
content, never a link to the live file, so a program truncating a file in place later cannot
reach into a committed snapshot.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import os
import posixpath
import re
import stat as stat_mod
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from nodus import protocol
from nodus.errors import StoreError, UsageError
from nodus.store import _io
from nodus.store._io import copy_hashing
from nodus.store.names import path_problem

__all__ = [
    "Candidate",
    "Excluder",
    "FileCache",
    "Patterns",
    "ReadResult",
    "excluded",
    "read_consistently",
    "select",
]

CAPTURE_READ_ATTEMPTS = 5
"""Reads of a file that keeps changing during capture before that capture gives up."""

CAPTURE_QUIET_S = 0.01
"""A read is trusted at once only if the file had been left alone this long when it began: a
write already under way when nodus looked has moved mtime but not yet all its bytes."""

CAPTURE_RACY_S = 1.0
"""A file modified this recently is re-read next time even if size, mtime and inode match:
a write within the file system's timestamp granularity would otherwise go unnoticed."""

EventSink = Callable[[str, dict[str, Any]], None]
Signature = tuple[int, int, int, int, int]  # size, mtime_ns, ctime_ns, inode, device


@dataclass(frozen=True)
class Candidate:
    """A path chosen for capture: a regular file, or a symlink that stays inside the selection."""

    rel: str  # "/"-separated, relative to the root
    full: str
    target: str | None = None  # set for symlinks


@runtime_checkable
class Excluder(Protocol):
    """Says whether one path is left out; its folders were judged on the way down."""

    def leaves_out(self, path: str, name: str, is_dir: bool = False) -> bool: ...


def select(
    root: str, paths: Sequence[str], excludes: Sequence[str] | Excluder, on_event: EventSink
) -> list[Candidate]:
    """Everything the literal ``paths`` select under ``root``; missing ones are skipped.

    ``excludes``: :class:`Patterns` to compile, or an :class:`Excluder` that decides alone (a
    source's, :mod:`nodus.runner.workspace.source`, which leaves out ``.nodus`` itself).

    ``.`` selects everything except the runner-private folder. Symlinks are kept as links only
    when they point inside the selection; any other is refused and reported through
    ``on_event``, never followed (it could copy the whole disk, or a secret, into a snapshot).
    A path whose name no restore accepts (:mod:`nodus.store.names`: a backslash) is left out
    with the event ``capture_name_refused``, so no snapshot holds a file it cannot restore.
    """
    selection = [_normalise(path) for path in paths]
    # Last, so no "!" line can bring it back; compiled once for the whole walk.
    patterns = (
        excludes if isinstance(excludes, Excluder) else Patterns([*excludes, protocol.CONTROL_DIR])
    )
    found: dict[str, Candidate] = {}
    for rel in selection:
        for candidate in _walk(root, rel, patterns, on_event):
            found.setdefault(candidate.rel, candidate)
    kept = []
    real_root = os.path.realpath(root)
    for candidate in sorted(found.values(), key=lambda c: c.rel):
        problem = path_problem(candidate.rel)
        if problem is not None:  # restores refuse it: stored, it would spoil the snapshot
            on_event("capture_name_refused", {"path": candidate.rel, "reason": problem})
            continue
        if candidate.target is not None and not _inside(candidate, selection, patterns, real_root):
            on_event(
                "capture_symlink_refused",
                {
                    "path": candidate.rel,
                    "target": candidate.target,
                    "reason": "points outside the selected paths",
                },
            )
            continue
        kept.append(candidate)
    return kept


def _normalise(path: str) -> str:
    clean = posixpath.normpath(path.replace(os.sep, "/"))
    if posixpath.isabs(clean) or clean == ".." or clean.startswith("../"):
        raise UsageError(f"capture path {path!r} must be relative and stay inside the folder")
    return clean


def _walk(
    root: str, rel: str, patterns: Excluder, on_event: EventSink, judged: bool = False
) -> Iterator[Candidate]:
    full = root if rel == "." else os.path.join(root, rel)
    try:
        info = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return  # a missing path is skipped; the selection is never widened
    if not judged and rel != "." and excluded(rel, patterns, stat_mod.S_ISDIR(info.st_mode)):
        return
    if stat_mod.S_ISLNK(info.st_mode):
        yield Candidate(rel, full, os.readlink(full))
    elif stat_mod.S_ISREG(info.st_mode):
        yield Candidate(rel, full)
    elif stat_mod.S_ISDIR(info.st_mode):
        yield from _walk_dir(root, rel, patterns, on_event)
    else:
        on_event("capture_file_skipped", {"path": rel, "reason": "not a regular file"})


def _walk_dir(root: str, rel: str, patterns: Excluder, on_event: EventSink) -> Iterator[Candidate]:
    full = root if rel == "." else os.path.join(root, rel)
    try:
        with os.scandir(full) as listing:
            # A link is no folder (as for git): `data/` leaves out no link named data.
            entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in listing]
    except (FileNotFoundError, NotADirectoryError):
        return  # removed while we walked (an older checkpoint being cleaned up)
    prefix = "" if rel == "." else f"{rel}/"
    # The folders above were judged on the way down: only the child's own name is new. Judged
    # before the sort: a folder of many checkpoints keeps one.
    kept = [
        name for name, is_dir in entries if not patterns.leaves_out(prefix + name, name, is_dir)
    ]
    for name in sorted(kept):
        yield from _walk(root, prefix + name, patterns, on_event, judged=True)


def excluded(rel: str, patterns: Sequence[str] | Excluder, is_dir: bool = False) -> bool:
    """Whether ``rel`` (a folder when ``is_dir``) is left out by ``patterns``.

    Plain patterns are nodus's own (:class:`Patterns`): a name pattern (``*.pyc``, ``.venv``)
    matches a file or folder of that name at any depth; a pattern with a ``/`` (``data/raw``)
    matches that path. The last pattern that matches decides, and ``!pattern`` brings back what
    an earlier one left out. A folder left out takes everything under it, so ``!`` cannot bring
    back a file inside a folder that is left out. A source's ``.nodusignore`` lines follow
    gitignore's rules instead (:mod:`nodus.runner.workspace.source`).
    """
    compiled = patterns if isinstance(patterns, Excluder) else Patterns(patterns)
    parts = rel.split("/")
    last = len(parts) - 1
    return any(
        compiled.leaves_out("/".join(parts[: depth + 1]), parts[depth], depth < last or is_dir)
        for depth in range(len(parts))
    )


class Patterns:
    """Exclude patterns compiled once for a whole walk.

    A literal pattern (no ``*?[``) is looked up in a dict, so a capture that leaves out a
    thousand other checkpoint folders by name costs one lookup a path, not a thousand matches.
    Globs are tried newest first and only until an older one could no longer decide.
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        self._names: dict[str, tuple[int, bool]] = {}  # literal name -> (last index, keep)
        self._paths: dict[str, tuple[int, bool]] = {}  # literal path with "/" -> same
        self._globs: list[tuple[int, bool, bool, re.Pattern[str]]] = []  # index, keep, by path
        for index, raw in enumerate(patterns):
            keep = raw.startswith("!")
            pattern = (raw[1:] if keep else raw).strip("/")
            if not pattern:
                continue
            by_path = "/" in pattern
            if _GLOB.search(pattern) is None:
                (self._paths if by_path else self._names)[pattern] = (index, keep)
            else:
                compiled = re.compile(fnmatch.translate(pattern))
                self._globs.append((index, keep, by_path, compiled))
        self._globs.reverse()

    def leaves_out(self, path: str, name: str, is_dir: bool = False) -> bool:
        """The verdict of the last pattern matching one path (``name``: its last part); these
        patterns match a file and a folder alike."""
        best = max(self._paths.get(path, _NONE), self._names.get(name, _NONE))
        for index, keep, by_path, compiled in self._globs:
            if index < best[0]:
                break
            if compiled.match(path if by_path else name):
                best = (index, keep)
                break
        return best[0] >= 0 and not best[1]


_GLOB = re.compile(r"[*?\[]")
_NONE = (-1, False)


def _inside(link: Candidate, selection: list[str], patterns: Excluder, real_root: str) -> bool:
    """Whether the link leads into the selection: read as written, and resolved as the system
    resolves it (a chain of links can lead out where each link alone looks inside)."""
    target = link.target or ""
    if posixpath.isabs(target):
        return False
    lexical = posixpath.normpath(posixpath.join(posixpath.dirname(link.rel), target))
    real = os.path.relpath(os.path.realpath(link.full), real_root).replace(os.sep, "/")
    is_dir = os.path.isdir(link.full)  # what the link leads to, for a pattern naming folders
    return all(_selected(resolved, selection, patterns, is_dir) for resolved in (lexical, real))


def _selected(resolved: str, selection: list[str], patterns: Excluder, is_dir: bool) -> bool:
    if resolved in (".", "..") or resolved.startswith("../"):
        return False
    if excluded(resolved, patterns, is_dir):
        return False
    return any(s == "." or resolved == s or resolved.startswith(s + "/") for s in selection)


class FileCache:
    """Hashes of files already captured, keyed by path and a signature of their state.

    Lives in the store object the runner keeps for an attempt, so a re-capture of an unchanged
    folder neither re-reads nor re-stores a byte.
    """

    def __init__(self) -> None:
        self._known: dict[str, tuple[Signature, str]] = {}

    def get(self, full: str, signature: Signature) -> str | None:
        hit = self._known.get(full)
        return hit[1] if hit and hit[0] == signature else None

    def forget(self, full: str) -> None:
        self._known.pop(full, None)

    def put(self, full: str, signature: Signature, digest: str, read_started_ns: int) -> None:
        # A file modified just before we read it may change again within the same timestamp
        # tick and keep its signature ("racily clean"); such files are simply read next time.
        if signature[1] < read_started_ns - int(CAPTURE_RACY_S * 1e9):
            self._known[full] = (signature, digest)


@dataclass(frozen=True)
class ReadResult:
    digest: str
    size: int
    mode: int
    spool: str | None  # the copy to adopt as a blob; None when the cache knew the hash
    mtime_ns: int  # of the state read: a restore gives the file this time again
    data: bytes | None = None  # a small file's content, read instead of a spool copy
    identity: tuple[int, ...] | None = None  # size, mtime_ns, inode, device: of a hash-only read


def read_consistently(
    full: str,
    rel: str,
    new_spool: Callable[[], str] | None,
    cache: FileCache,
    *,
    direct: bool = False,
    settled: bool = False,
) -> ReadResult | None:
    """Hash (and copy to a spool file) one real state of ``full``; None if it vanished.

    ``new_spool`` names a fresh spool file (the storage's ``spool_path``); None hashes the file
    where it lies, for a file that becomes the blob itself (``ReadResult.identity`` then says
    which state was hashed). ``direct``: the
    spool is the blob's final home on this disk, so large files may be written past the page
    cache (a spool that is uploaded and removed is better left in memory). ``settled``: the
    file was published whole and is never written again (an integration's checkpoint), so a
    read need not wait for it to have been left alone a while; one during which it changed is
    still read again.
    """
    attempts = CAPTURE_READ_ATTEMPTS
    for attempt in range(attempts):
        try:
            # The last attempt takes any read during which the file it read did not change,
            # so a file the program touches every few milliseconds (a log) is still captured
            # as it stood during the read.
            strict = attempt < attempts - 1 and not settled
            result = _read_once(full, new_spool, cache, strict=strict, direct=direct)
        except FileNotFoundError:
            return None
        if result is not None:
            return result
        time.sleep(0.02 * (attempt + 1))  # let the writer finish its burst before looking again
    raise StoreError(
        f"{rel} kept changing while it was captured ({attempts} reads); "
        "this capture was not committed"
    )


def _read_once(
    full: str, new_spool: Callable[[], str] | None, cache: FileCache, strict: bool, direct: bool
) -> ReadResult | None:
    """One read; None when it cannot be trusted to be one real state of the file.

    Strict reads also want the file left alone for ``CAPTURE_QUIET_S`` before the read (a
    write already under way has moved mtime but not yet all its bytes) and still at its path
    afterwards (not replaced during the copy).
    """
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb", buffering=0) as source:
        before = os.fstat(fd)
        signature = file_signature(before)
        mode = stat_mod.S_IMODE(before.st_mode)
        digest = cache.get(full, signature)
        if digest is not None:
            return ReadResult(digest, before.st_size, mode, None, before.st_mtime_ns)
        started = time.time_ns()
        if new_spool is None:
            digest, count = copy_hashing(source, None)
            if _trusted(fd, full, before, signature, count, started, strict):
                cache.put(full, signature, digest, started)
                identity = (before.st_size, before.st_mtime_ns, before.st_ino, before.st_dev)
                return ReadResult(digest, count, mode, None, before.st_mtime_ns, identity=identity)
            return None
        if before.st_size < min(_io.STORE_SMALL_FILE_BYTES, _io.STORE_DIRECT_MIN_BYTES):
            memory = io.BytesIO()  # written to the store later, and only if it lacks the blob
            digest, count = copy_hashing(source, memory)
            if _trusted(fd, full, before, signature, count, started, strict):
                cache.put(full, signature, digest, started)
                data = memory.getvalue()
                return ReadResult(digest, count, mode, None, before.st_mtime_ns, data)
            return None
        spool = new_spool()
        try:
            with open(spool, "w+b", buffering=0) as sink:
                digest, count = copy_hashing(source, sink, direct="write" if direct else None)
                if _trusted(fd, full, before, signature, count, started, strict):
                    cache.put(full, signature, digest, started)
                    return ReadResult(digest, count, mode, spool, before.st_mtime_ns)
        except BaseException:
            _remove(spool)
            raise
    _remove(spool)
    return None


def _trusted(
    fd: int,
    full: str,
    before: os.stat_result,
    signature: Signature,
    count: int,
    started: int,
    strict: bool,
) -> bool:
    """Whether what was read is one real state of the file (see :func:`_read_once`)."""
    stable = file_signature(os.fstat(fd)) == signature and count == before.st_size
    quiet = signature[1] <= started - int(CAPTURE_QUIET_S * 1e9)
    return stable and (not strict or (quiet and _same_file_at(full, before)))


def file_signature(info: os.stat_result) -> Signature:
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


def _same_file_at(full: str, before: os.stat_result) -> bool:
    """False when the path now names another file (replaced by rename during the copy)."""
    try:
        now = os.lstat(full)
    except FileNotFoundError:
        return False
    return (now.st_ino, now.st_dev) == (before.st_ino, before.st_dev)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
