"""Resolutions remembered by their inputs: a workload file run again is not checked again.

Checking and resolving a workload file takes pydantic: importing it and building the workload's
validators is about a third of what ``nodus run`` adds to a short program, and a workload run
from cron is the same file every time. A resolution is a pure function of the file's text,
where it lies (``code`` is relative to its folder), the command line's overrides, ``$HOME``,
this code (the state of every module of :mod:`nodus.schemas`, which an upgrade rewrites), and
one fact of the disk: each stage's code folder exists. So the resolved workload is kept under
``$NODUS_HOME/cache/resolved/`` (``defaults.RESOLVED_DIR``) by a digest of all but the last,
which is checked again on every use: a folder gone since is resolved afresh, to be refused in
the usual words.

Managed-method workloads are never remembered: their resolution reads the base model and the
dataset, whose contents are not in the digest. A cache entry that cannot be read is resolved
afresh and written again; it is written without fsync, as a crash can only lose it. The cache
keeps the ``RESOLVED_KEEP`` entries used most recently (a use touches its entry; a new
one removes the least recently used beyond that), so a home that ran many files stays small.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

from nodus._atomic import private_folder, write_json_atomic
from nodus.schemas import defaults
from nodus.schemas.files import regular_file
from nodus.schemas.resolved import ResolvedWorkload

RESOLVED_KEEP = 256
"""How many remembered resolutions the cache keeps: those used most recently."""

_FORMAT = 1


def resolve_remembered(
    path: str, overrides: Mapping[str, Any] | None, home: str
) -> ResolvedWorkload:
    """:func:`nodus.schemas.loader.resolve_file`, remembered under ``home`` (module's doc)."""
    source = os.path.abspath(path)
    if not regular_file(source):
        return _resolve(path, overrides)  # refused there, in the usual words
    try:
        with open(source, "rb") as handle:
            text = handle.read()
    except OSError:
        return _resolve(path, overrides)  # refused there, in the usual words
    key = _digest(path, source, text, overrides)
    entry = os.path.join(home, defaults.RESOLVED_DIR, f"{key}.json")
    remembered = _read(entry)
    if remembered is not None and all(os.path.isdir(s.code) for s in remembered.stages):
        _touch(entry)
        return remembered
    resolved = _resolve(path, overrides, text)  # what the digest names, not a newer text
    if not resolved.framework:
        _write(entry, resolved)
    return resolved


def _resolve(
    source: str, overrides: Mapping[str, Any] | None, text: bytes | None = None
) -> ResolvedWorkload:
    from nodus.schemas.loader import resolve_file  # pydantic: only when not remembered

    return resolve_file(source, overrides=overrides, data=text)


def _digest(path: str, source: str, text: bytes, overrides: Mapping[str, Any] | None) -> str:
    inputs = {
        "format": _FORMAT,
        "schemas": _code_state(),
        "path": path,  # as given: the resolution keeps it, for messages
        "source": source,
        "home": os.environ.get("HOME", ""),  # `~` in a path
        "overrides": overrides or {},
        "text": hashlib.sha256(text).hexdigest(),
    }
    encoded = json.dumps(inputs, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:40]


def _code_state() -> list[tuple[str, int, int]]:
    """Every module of this package as it is on disk: an edited checkout resolves afresh."""
    folder = os.path.dirname(os.path.abspath(__file__))
    state = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py"):
            info = os.stat(os.path.join(folder, name))
            state.append((name, info.st_size, info.st_mtime_ns))
    return state


def _read(entry: str) -> ResolvedWorkload | None:
    try:
        with open(entry, encoding="utf-8") as handle:
            return ResolvedWorkload.from_dict(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, or not what this code writes: resolved afresh


def _write(entry: str, resolved: ResolvedWorkload) -> None:
    folder = os.path.dirname(entry)
    try:
        private_folder(folder)  # and the home, when this makes it (docs/security.md)
        write_json_atomic(entry, resolved.to_dict(), durable=False)
        _prune(folder, RESOLVED_KEEP)
    except OSError:
        pass  # a cache: the next run resolves again


def _touch(entry: str) -> None:
    """Mark ``entry`` used now, so pruning keeps it over entries not used since."""
    # removed meanwhile by another nodus's pruning: written again on a miss
    with contextlib.suppress(OSError):
        os.utime(entry)


def _prune(folder: str, keep: int) -> None:
    """Remove all but the ``keep`` entries used most recently (their modification times)."""
    entries = []
    with os.scandir(folder) as found:
        for item in found:
            try:
                entries.append((item.stat().st_mtime_ns, item.path))
            except OSError:
                continue  # removed meanwhile
    entries.sort(reverse=True)
    for _, path in entries[keep:]:
        with contextlib.suppress(OSError):
            os.unlink(path)
