"""What Linux says about processes: ``/proc`` tables, pidfds and the ``prctl`` flags nodus uses.

Only standard-library calls, so the attempt supervisor that imports this starts in milliseconds.
A pid alone never identifies a process for long (pids are reused); callers pair it with the
start time from ``/proc/<pid>/stat`` or hold a pidfd, which always means the process it was
opened for.
"""

from __future__ import annotations

import ctypes
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Iterator
else:
    # The C half of ``signal``, which builds its enums at import: milliseconds of every
    # supervisor's start (the same functions and numbers).
    import _signal as signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# The C library this interpreter is linked against, found by dlopen(NULL): importing
# ctypes.util to look it up would cost every supervisor start about 10 ms.
_LIBC = ctypes.CDLL(None, use_errno=True)


class Stat:
    """The fields of ``/proc/<pid>/stat`` nodus reads (a plain class: the supervisor imports
    neither dataclasses nor ``typing``, :mod:`.messages` says why)."""

    __slots__ = ("comm", "cpu_ticks", "exit_code", "pid", "ppid", "rss_pages", "starttime", "state")

    def __init__(
        self,
        *,
        pid: int,
        comm: str,
        state: str,
        ppid: int,
        starttime: int,
        exit_code: int,
        cpu_ticks: int = 0,
        rss_pages: int = 0,
    ) -> None:
        self.pid = pid
        self.comm = comm
        self.state = state  # "Z": a zombie, dead and waiting for its parent to reap it
        self.ppid = ppid
        self.starttime = starttime  # clock ticks after boot: with the pid, names one process
        self.exit_code = exit_code  # a zombie's status as waitpid() reports it; 0 while alive
        self.cpu_ticks = cpu_ticks  # user + system time so far, in clock ticks (SC_CLK_TCK)
        self.rss_pages = rss_pages  # resident memory, in pages

    def __repr__(self) -> str:
        return f"Stat(pid={self.pid}, comm={self.comm!r}, state={self.state!r})"


def stat(pid: int) -> Stat | None:
    """The process's stat line, or None once it is gone (reaped) or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        return _parse_stat(pid, data)
    except (ValueError, IndexError):  # read while the process was torn down
        return None


def _parse_stat(pid: int, data: bytes) -> Stat:
    # comm may hold spaces and parentheses; it ends at the last ')'.
    close = data.rindex(b")")
    fields = data[close + 2 :].split()
    return Stat(
        pid=pid,
        comm=data[data.index(b"(") + 1 : close].decode(errors="replace"),
        state=fields[0].decode(),
        ppid=int(fields[1]),
        starttime=int(fields[19]),
        exit_code=int(fields[49]) if len(fields) > 49 else 0,
        cpu_ticks=int(fields[11]) + int(fields[12]),
        rss_pages=int(fields[21]),
    )


def pids() -> Iterator[int]:
    """Every process (thread-group leader) visible in ``/proc``."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def table() -> dict[int, Stat]:
    """Every process's stat, read in one pass (processes that end meanwhile are left out)."""
    found = {}
    for pid in pids():
        entry = stat(pid)
        if entry is not None:
            found[pid] = entry
    return found


def descendants(root: int, processes: dict[int, Stat]) -> list[Stat]:
    """The processes below ``root`` in ``processes``, parents before their children."""
    children: dict[int, list[Stat]] = {}
    for entry in processes.values():
        children.setdefault(entry.ppid, []).append(entry)
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += [entry.pid for entry in below]
    return found


def command_line(pid: int) -> str:
    """The process's command line as one string ("" for a zombie or a vanished process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return ""
    return " ".join(word.decode(errors="replace") for word in words)


def environ_value(pid: int, name: str) -> str | None:
    """A variable of the environment the process was started with (None if absent/unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:  # gone, or another user's process
        return None
    prefix = name.encode() + b"="
    for entry in entries:
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def rank_process(root: int, rank: int) -> int | None:
    """The living process below ``root`` that a launcher (``torchrun``, ``accelerate launch``)
    started for ``rank`` (its ``RANK``), or None until it runs; its own children inherit the
    variable but come after it."""
    for entry in descendants(root, table()):
        if entry.state != "Z" and environ_value(entry.pid, "RANK") == str(rank):
            return entry.pid
    return None


def living(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    entry = stat(pid)
    return entry is not None and entry.state != "Z"


def open_pidfd(pid: int, starttime: int) -> int | None:
    """A pidfd for the process ``(pid, starttime)``, or None if that process is gone."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    again = stat(pid)  # the pid may have been reused between the scan and the open
    if again is None or again.starttime != starttime:
        os.close(fd)
        return None
    return fd


def signal_pidfd(fd: int, signum: int) -> bool:
    """Signal the process a pidfd names; False once it has been reaped."""
    try:
        signal.pidfd_send_signal(fd, signum)
    except ProcessLookupError:
        return False
    return True


def become_subreaper() -> None:
    """Orphans below this process are re-parented to it instead of to init (double forks too)."""
    if _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def die_with_parent(parent_pid: int, signum: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``signum`` when the thread that forked it exits.

    PR_SET_PDEATHSIG follows the *thread* that forked, so spawn only from the main thread.
    """

    def prepare() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return prepare


def oom_kills() -> int | None:
    """The OOM kills the kernel counted in this process's memory cgroup, where it says.

    cgroup v2 reports them in ``memory.events``, v1 in ``memory.oom_control``; None where
    neither is readable, so nothing is ever named an OOM kill without the kernel's word.
    """
    for path in _memory_counter_files():
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _memory_counter_files() -> list[str]:
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    files = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":  # the unified (v2) hierarchy
            files.append(f"/sys/fs/cgroup{path.rstrip('/')}/memory.events")
        elif "memory" in controllers.split(","):
            files.append(f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control")
    return files
