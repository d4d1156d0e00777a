"""What a path in a snapshot may be: one rule for captures, manifests read back and restores.

A capture that stored a name a restore refuses would make every recovery from that snapshot
start over, so the capture asks the same function first and leaves such a file out (with an
event naming it). Paths are ``/``-separated and relative; a backslash is refused because a
restore on another system could read it as a separator, a NUL because no system takes it.
"""

from __future__ import annotations

import posixpath

__all__ = ["escaping_link", "link_problem", "path_problem"]

_MAX_HOPS = 40  # as the kernel: a longer chain is a loop, which resolves nowhere


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

    Read alone: a chain of links can still lead out, which :func:`escaping_link` follows
    through the snapshot's own links, and a restore resolves each link it made as well (the
    target may hold links of its own: :mod:`nodus.store.restore`).
    """
    if not isinstance(target, str) or not target or "\x00" in target:
        return "is a symlink with an empty or unreadable target"
    if target.startswith("/"):
        return f"is a symlink to the absolute path {target!r}"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return f"is a symlink to {target!r}, outside the snapshot"
    return None


def escaping_link(links: dict[str, str]) -> str | None:
    """The first of a snapshot's links (path -> target) that leads out of it when followed
    through the others, as the system would follow them; None when none does."""
    for path in sorted(links):
        if _escapes(path, links):
            return path
    return None


def _escapes(path: str, links: dict[str, str]) -> bool:
    here: list[str] = path.split("/")[:-1]  # a link's target is read from its own folder
    left = links[path].split("/")[::-1]  # components still to walk, next one last
    hops = 0
    while left:
        part = left.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                return True
            here.pop()
            continue
        here.append(part)
        target = links.get("/".join(here))
        if target is not None:
            hops += 1
            if hops > _MAX_HOPS or target.startswith("/"):
                return hops <= _MAX_HOPS
            here.pop()
            left.extend(target.split("/")[::-1])
    return False
