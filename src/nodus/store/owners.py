"""Who wrote a coordination flag (a capture's intent, a sweep's lock), and whether it still runs.

Flags expire after a lease because a killed process cannot take its flag back. Waiting out a
ten-minute lease after every killed capture or gc would stall the store, so each flag names its
owner: the machine (its boot and its pid namespace), the pid and the process's start time.
Another process on the same machine and in the same pid namespace can then tell at once that
the owner is gone. On another machine, or where ``/proc`` cannot say, only the lease decides:
an owner is taken for gone only when that is certain, never on a guess.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["gone", "me"]

_mine: dict[str, Any] = {}


def me() -> dict[str, Any]:
    """This process, as recorded in the flags it writes (computed again after a fork)."""
    if _mine.get("pid") != os.getpid():
        pid = os.getpid()
        _mine.clear()
        process = _process(pid)
        _mine.update(machine=_machine(), pid=pid, started=None if process is None else process[1])
    return dict(_mine)


def gone(owner: Any) -> bool:
    """True when ``owner`` (as :func:`me` recorded it) certainly no longer runs."""
    if not isinstance(owner, dict):
        return False  # written by a process that did not say who it was: the lease decides
    machine, pid = owner.get("machine"), owner.get("pid")
    if machine is None or machine != me()["machine"] or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # sends nothing: asks only whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # another user's process: it exists, and /proc may not show it (hidepid)
    process = _process(pid)
    if process is None or owner.get("started") is None:
        return False  # it exists and cannot be told apart from the owner: the lease decides
    state, started = process
    # Only its zombie is left, or the pid now belongs to a process started later.
    return state in ("Z", "X") or started != owner["started"]


def _machine() -> str | None:
    """This kernel's boot and this pid namespace: pids mean the same process only within both."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}/{namespace}"


def _process(pid: int) -> tuple[str, int] | None:
    """The state and start time (clock ticks since boot) of process ``pid``; None if unseen."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields after it do not.
    fields = stat.rpartition(")")[2].split()
    try:
        return fields[0], int(fields[19])  # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None
