"""What a running attempt uses now: CPU and memory of its program's process tree (``/proc``),
and, where ``nvidia-smi`` answers, each GPU's use and memory (docs/ui.md, "A run").

Read by whoever looks (``nodus ui``), never by the runner: nothing here is recorded. The program's
pid is the catalog's (the supervisor's child, ``attempts.pid``); only an attempt on this machine
can be read. A machine without a GPU, or without ``nvidia-smi``, has no GPU line, and no error.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from typing import Any

from nodus.runner.processes import procfs

__all__ = ["GPU_QUERY", "CpuMeter", "attempt_use", "cpu_percent", "gpus", "parse_gpu_csv"]

GPU_QUERY = "index,name,utilization.gpu,memory.used,memory.total"
"""The fields asked of ``nvidia-smi --query-gpu`` (``--format=csv,noheader,nounits``)."""
_GPU_TIMEOUT_S = 5.0
_MIB = 1024 * 1024


def parse_gpu_csv(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits`` as rows: ``{index,
    name, utilization (percent), memory_used, memory_total (bytes)}``; a field the GPU does not
    report (``[N/A]``, ``[Not Supported]``) is None, a line that is no GPU's is left out."""
    found = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        utilization, used, total = (_number(field) for field in fields[2:])
        found.append(
            {
                "index": int(fields[0]),
                "name": fields[1],
                "utilization": utilization,
                "memory_used": None if used is None else int(used * _MIB),
                "memory_total": None if total is None else int(total * _MIB),
            }
        )
    return found


def _number(field: str) -> float | None:
    try:
        return float(field)
    except ValueError:
        return None


def gpus() -> list[dict[str, Any]] | None:
    """This machine's GPUs as :func:`parse_gpu_csv` gives them; None where there is no
    ``nvidia-smi`` or it does not answer (no driver, no GPU)."""
    command = shutil.which("nvidia-smi")
    if command is None:
        return None
    try:
        answer = subprocess.run(
            [command, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_GPU_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if answer.returncode != 0:
        return None
    return parse_gpu_csv(answer.stdout) or None


def cpu_percent(ticks: int, seconds: float, hertz: int) -> float | None:
    """CPU use in percent of one core (200: two cores busy) of ``ticks`` spent in ``seconds``."""
    if seconds <= 0 or ticks < 0:
        return None
    return 100.0 * ticks / hertz / seconds


class CpuMeter:
    """CPU use of a process tree between two looks: the first look of a tree measures since its
    root started, each later one since the look before (a page refreshes every 2 s)."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], tuple[float, int]] = {}  # (pid, start) → (at, ticks)
        self._lock = threading.Lock()

    def measure(self, root: procfs.Stat, ticks: int) -> tuple[float | None, float]:
        """(percent, over how many seconds) for ``root``'s tree, which has used ``ticks``."""
        hertz = os.sysconf("SC_CLK_TCK")
        now = time.monotonic()
        with self._lock:
            before = self._last.get((root.pid, root.starttime))
            self._last[(root.pid, root.starttime)] = (now, ticks)
        if before is not None and now > before[0]:
            # a child that ended took its ticks along: never a negative use
            spent = max(ticks - before[1], 0)
            return cpu_percent(spent, now - before[0], hertz), now - before[0]
        seconds = _uptime() - root.starttime / hertz
        return cpu_percent(ticks, seconds, hertz), seconds


def _uptime() -> float:
    with open("/proc/uptime", encoding="ascii") as handle:
        return float(handle.read().split()[0])


_METER = CpuMeter()


def attempt_use(attempt: dict[str, Any], meter: CpuMeter = _METER) -> dict[str, Any] | None:
    """A running attempt's use now: ``{pid, processes, cpu_percent, cpu_seconds_over,
    memory_bytes, gpus}``; None when it ended, runs on another machine or its program is gone.

    ``memory_bytes`` is the resident memory of the program and every process below it (shared
    pages counted in each); ``gpus`` is None without a GPU.
    """
    pid = attempt.get("pid")
    if attempt.get("outcome") is not None or not pid:
        return None
    if attempt.get("host") not in (None, socket.gethostname()):
        return None
    processes = procfs.table()
    root = processes.get(pid)
    if root is None or root.state == "Z":
        return None
    tree = [root, *procfs.descendants(pid, processes)]
    ticks = sum(member.cpu_ticks for member in tree)
    percent, over = meter.measure(root, ticks)
    return {
        "pid": pid,
        "processes": len(tree),
        "cpu_percent": percent,
        "cpu_seconds_over": over,
        "memory_bytes": sum(member.rss_pages for member in tree) * os.sysconf("SC_PAGE_SIZE"),
        "gpus": gpus(),
    }
