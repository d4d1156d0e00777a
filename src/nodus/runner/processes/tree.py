"""The processes below an attempt's supervisor, watched so that each one's end is seen.

The supervisor is a child-subreaper, so everything the program starts stays below it at any
depth: a process that dies in the middle of the tree (the first half of a double fork, say)
hands its children up to the supervisor instead of to init. The tree is found by scanning
``/proc`` (there is no cheaper child list on every kernel) and each member is then held by a
pidfd, which becomes readable the moment the process ends.

For a member whose parent is another member, that moment is the only chance to learn how it
ended: its zombie's ``/proc/<pid>/stat`` holds its exit status until the parent reaps it.
torchrun's agent looks at its workers every 0.1 s, so a killed worker is seen; a shell blocked
in ``wait()`` reaps at once, and its child counts as *vanished* (its status unknown here; the
kernel's exit event tells it where the supervisor may listen, :mod:`.procevents`).
"""

from __future__ import annotations

import os

from nodus.runner.processes import procfs


class Member:
    """A process of the tree, held by a pidfd (a plain class: the supervisor imports no
    dataclasses, :mod:`.messages` says why)."""

    __slots__ = ("comm", "command", "parent", "pid", "pidfd", "starttime")

    def __init__(
        self, *, pid: int, starttime: int, parent: int, comm: str, command: str, pidfd: int | None
    ) -> None:
        self.pid = pid
        self.starttime = starttime
        self.parent = parent  # the parent it had when first seen
        self.comm = comm
        self.command = command
        self.pidfd = pidfd  # None once it ended as a child of the root (waitpid tells the rest)

    def __repr__(self) -> str:
        return f"Member(pid={self.pid}, command={self.command!r})"


class Tree:
    """The descendants of ``root`` (the supervisor itself), each held by a pidfd."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.members: dict[int, Member] = {}

    def scan(self) -> None:
        """Take in processes started since the last scan; rename any that called ``exec``."""
        for entry in procfs.descendants(self.root, procfs.table()):
            member = self.members.get(entry.pid)
            if member is not None and member.starttime != entry.starttime:
                self.forget(entry.pid)  # its end went unseen and the pid was reused
                member = None
            if member is None:
                self._adopt(entry)
            elif member.comm != entry.comm:
                member.comm = entry.comm
                member.command = procfs.command_line(entry.pid) or member.command

    def pidfds(self) -> dict[int, Member]:
        return {m.pidfd: m for m in self.members.values() if m.pidfd is not None}

    def ended(self, member: Member) -> int | None:
        """Called when the member's pidfd is readable: its wait status, if it can be read.

        None for a child of the root (it stays a member until :meth:`forget` after waitpid)
        and for a member already reaped by its parent (vanished).
        """
        entry = procfs.stat(member.pid)
        if entry is not None and entry.starttime != member.starttime:
            entry = None  # the pid is another process's now
        if entry is not None and entry.ppid == self.root:
            self._close(member)
            return None
        status = None
        # The zombie's status is its own only if the pidfd still reaches it after the read.
        pidfd = member.pidfd
        if (
            entry is not None
            and entry.state == "Z"
            and pidfd is not None
            and procfs.signal_pidfd(pidfd, 0)
        ):
            status = entry.exit_code
        self.forget(member.pid)
        return status

    def forget(self, pid: int) -> Member | None:
        member = self.members.pop(pid, None)
        if member is not None:
            self._close(member)
        return member

    def signal_all(self, signum: int) -> None:
        for member in list(self.members.values()):
            if member.pidfd is not None:
                procfs.signal_pidfd(member.pidfd, signum)

    def close(self) -> None:
        for pid in list(self.members):
            self.forget(pid)

    def _adopt(self, entry: procfs.Stat) -> None:
        if entry.state == "Z":
            return  # already dead: whoever reaps it decides what it was
        fd = procfs.open_pidfd(entry.pid, entry.starttime)
        if fd is None:
            return
        self.members[entry.pid] = Member(
            pid=entry.pid,
            starttime=entry.starttime,
            parent=entry.ppid,
            comm=entry.comm,
            command=procfs.command_line(entry.pid) or entry.comm,
            pidfd=fd,
        )

    @staticmethod
    def _close(member: Member) -> None:
        if member.pidfd is not None:
            os.close(member.pidfd)
            member.pidfd = None
