"""What a capture at one step takes: the stage's selection with ``state/`` narrowed to that
step's checkpoint folder, and a cheap fingerprint of it.

A program may keep every checkpoint folder it ever wrote, thousands of them; a capture must
cost the same whatever number lies beside the one it takes. So ``state/`` is listed once
(:func:`narrowed`): a selected ``state`` is walked as its entries, the other checkpoint
folders not among them; a selection that holds ``state/`` whole in another way (``.``), or a
path inside it, leaves them out by exclude patterns. The same listing is the baseline of the
capture's guard, which lists again just before the commit to catch a folder published
meanwhile.
"""

from __future__ import annotations

import os
import posixpath
import stat as stat_mod

from nodus import protocol
from nodus.protocol import checkpoint_folder, checkpoint_step
from nodus.stages.directory import Entry

__all__ = ["appeared", "fingerprint", "narrowed"]


def narrowed(
    root: str, paths: tuple[str, ...], step: int
) -> tuple[list[str], list[str], frozenset[str]]:
    """The paths a capture at ``step`` walks under ``root``, the paths it leaves out, and the
    names ``state/`` held when it was listed (for :func:`appeared`)."""
    listing = _state_listing(os.path.join(root, protocol.STATE_DIR))
    if listing is None:  # not a folder of its own (missing, a link): narrowed by excludes
        steps = protocol.checkpoint_steps(os.path.join(root, protocol.STATE_DIR))
        listed = frozenset(checkpoint_folder(other) for other in steps)
        return list(paths), _others(steps, step), listed
    steps, names = listing
    listed = frozenset(names).union(checkpoint_folder(other) for other in steps)
    walked: list[str] = []
    wider = False
    for rel in paths:
        normal = posixpath.normpath(rel)
        if normal == protocol.STATE_DIR:
            walked += [f"{protocol.STATE_DIR}/{name}" for name in names]
            if step in steps:
                walked.append(f"{protocol.STATE_DIR}/{checkpoint_folder(step)}")
        else:
            walked.append(rel)
            # "." holds state/ whole; a path inside it may hold another step's folder
            wider = wider or normal == "." or normal.startswith(f"{protocol.STATE_DIR}/")
    return walked, _others(steps, step) if wider else [], listed


def appeared(root: str, listed: frozenset[str]) -> bool:
    """Whether ``state/`` holds a checkpoint folder now that it did not hold when ``listed``:
    only the names that are new are looked at."""
    state = os.path.join(root, protocol.STATE_DIR)
    try:
        names = os.listdir(state)
    except OSError:
        return False
    return any(
        name not in listed
        and checkpoint_step(name) is not None
        and os.path.isdir(os.path.join(state, name))
        for name in names
    )


def fingerprint(root: str, paths: list[str], excludes: list[str]) -> tuple[Entry, ...]:
    """Names, sizes and mtimes of what a capture of ``paths`` would take, sorted (the same
    files give the same fingerprint however the paths were narrowed).

    The excluded checkpoint folders are pruned where the walk meets them, never entered.
    """
    skipped = set(excludes)
    entries: list[Entry] = []
    for rel in paths:
        top = os.path.normpath(os.path.join(root, rel))
        for folder, dirs, files in os.walk(top) if os.path.isdir(top) else [("", [], [top])]:
            inside = os.path.relpath(folder, root) if folder else ""
            dirs[:] = [
                d for d in dirs if d != protocol.CONTROL_DIR and _joined(inside, d) not in skipped
            ]
            for name in files:
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, root)
                if relative in skipped:
                    continue
                try:
                    stat = os.lstat(path)  # a link as a link: never followed (a loop, out)
                except OSError:
                    continue
                entries.append((relative, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(set(entries)))


def _state_listing(state: str) -> tuple[list[int], list[str]] | None:
    """:func:`protocol.checkpoint_listing` of ``state``; None when ``state`` is not a folder
    (a link to one is walked as a link)."""
    try:
        if not stat_mod.S_ISDIR(os.lstat(state).st_mode):
            return None
    except OSError:
        return None
    return protocol.checkpoint_listing(state)


def _others(steps: list[int], step: int) -> list[str]:
    """The checkpoint folders of ``steps`` but ``step``'s, as paths a capture excludes."""
    return [f"{protocol.STATE_DIR}/{checkpoint_folder(other)}" for other in steps if other != step]


def _joined(folder: str, name: str) -> str:
    return name if folder in ("", ".") else f"{folder}/{name}"
