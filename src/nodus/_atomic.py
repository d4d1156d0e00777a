"""Small JSON files that other processes read while they are replaced.

The runner and the program it supervises talk through such files (``.nodus/``), as do the lock
holder notes: a reader must see the old file or the whole new one, never a torn one, and a
published file must survive a crash of the machine.

Files and folders only their owner can read, whatever the umask: ``$NODUS_HOME`` holds the run
catalog, the resolution cache, working copies and usually the store, what a run was given and
what it made. Under the usual umask 022 a plain ``mkdir`` or ``open`` would make all of it
readable by every user of the machine, so nodus creates its folders 0700 and its files 0600
explicitly (the mode given to ``mkdir``/``open`` is masked by the umask, so a ``chmod``
follows). Folders and files that already exist keep their modes: a home shared on purpose
stays shared (docs/security.md, "File modes").

Every folder :func:`private_folder` makes is fsynced into its parent before anything is written
inside (docs/store.md, "Durability").
"""

from __future__ import annotations

import json
import os
from typing import Any


def write_json_atomic(path: str, data: Any, durable: bool = True) -> None:
    """Write JSON to a temporary name, fsync it, rename it over ``path``, fsync the folder.

    ``durable=False`` leaves out both fsyncs, for a file that a crash of the machine makes
    moot: one an attempt's preparation writes anew each time (readers still never see it torn).
    """
    temp = f"{path}.{os.getpid()}.tmp"
    with open_private(temp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    """Make a rename inside ``path`` durable (a crash must not undo a published file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(path: str) -> None:
    """Make a folder just written durable: every file and folder under ``path``, then ``path``
    in its parent and each folder above it (a folder that cannot be opened is passed over)."""
    for folder, _folders, names in os.walk(path, topdown=False):
        for name in names:
            full = os.path.join(folder, name)
            if os.path.isfile(full) and not os.path.islink(full):
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(folder)
    current = os.path.abspath(path)
    while os.path.dirname(current) != current:
        current = os.path.dirname(current)
        try:
            fsync_dir(current)
        except OSError:
            continue  # one this user may not read: its entry was made by someone else


def tree_bytes(path: str) -> int:
    """The bytes of the files under ``path`` (links counted as themselves, never followed); a
    file renamed or removed while the tree is walked is not counted (it is counted where it
    went, the next time)."""
    total = 0
    for folder, _folders, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


FOLDER_MODE = 0o700
FILE_MODE = 0o600


def private_folder(path: str, *, durable: bool = True) -> None:
    """``os.makedirs(path, exist_ok=True)``, each folder it creates 0700 and durable in its
    parent when this returns (``durable=False``: for folders nothing acknowledged is ever kept
    in, which a power loss may take with it).

    A file fsynced and renamed into a new folder, its folder fsynced too, can still vanish in a
    power loss when the new folder's own entry in its parent was never written out: POSIX asks
    for an fsync of each parent that gained an entry. Every folder nodus makes for itself (the
    home, the store's folders, a run's work folders) is made here, so each level is synced
    once, when it is made, before anything inside can depend on it, whichever command happens
    to make it first; an existing folder costs one ``stat``.
    """
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise
            # Made meanwhile by another process: its creator set its mode. Its parent is synced
            # here all the same: that creator may not have got to it yet.
        else:
            os.chmod(folder, FOLDER_MODE)
        if durable:
            fsync_dir(os.path.dirname(folder))


def create_private(path: str, flags: int = os.O_WRONLY) -> int:
    """Open ``path`` for writing, created 0600 when absent (an existing file keeps its mode)."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return os.open(path, flags)
    os.fchmod(fd, FILE_MODE)
    return fd


def create_new_private(path: str) -> bool:
    """Create ``path`` empty and 0600 if it does not exist; an existing file is never opened
    (for a SQLite database, whose locks a close of any descriptor of it would drop)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except OSError:
        return False  # there already (or unreachable: its opener reports that in its words)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return True


def open_private(path: str, mode: str = "wb", **kwargs):
    """``open(path, mode)`` for a new file ("w"/"wb"), created 0600 (truncated if present)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, mode, **kwargs)
