"""What a path in a snapshot may be: one rule for captures, manifests read back and restores.

A capture that stored a name a restore refuses would make every recovery from that snapshot
start over, so the capture asks the same function first and leaves such a file out (with an
event naming it). Paths are ``/``-separated and relative; a backslash is refused because a
restore on another system could read it as a separator, a NUL because no system takes it.
"""

from __future__ import annotations

import posixpath

__all__ = ["link_problem", "path_problem"]


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot name a file of a snapshot; None when it can."""
    if not isinstance(path, str) or not path:
        return "is empty or not text"
    if "\x00" in path or "\\" in path:
        return "holds a NUL or backslash"
    if path.startswith("/"):
        return "is absolute"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "has an empty, '.' or '..' component"
    return None


def link_problem(path: str, target: object) -> str | None:
    """Why a symlink at ``path`` to ``target`` could lead out of the snapshot, read alone.

    Lexical only: a chain of links can still lead out, which only the links laid out can
    show, so a restore also resolves each link it made (:mod:`nodus.store.restore`).
    """
    if not isinstance(target, str) or not target or "\x00" in target:
        return "is a symlink with an empty or unreadable target"
    if target.startswith("/"):
        return f"is a symlink to the absolute path {target!r}"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return f"is a symlink to {target!r}, outside the snapshot"
    return None
