"""Where the test suite's CPU goes: every process it starts, by kind and by test, killed ones too.

    .venv/bin/python benchmarks/suite_processes.py [--interval 0.2] [--save FILE]
                                                   [-- COMMAND ...]

Runs COMMAND (by default `make test`'s pytest step) while it samples /proc every INTERVAL
seconds: each process's CPU time (user + system), its command line (the newest, so a supervisor's
child is counted as the program it became by ``exec``) and the test that started it (pytest's
``PYTEST_CURRENT_TEST``, which every process below a test inherits). A process is an *ML
process* once its resident memory passed 400 MB (torch loaded). A sampler, not an exit hook,
because the suite's fault tests SIGKILL their programs, and a killed process logs nothing.

Prints the wall time, the CPU of every process seen and of the ML processes, the CPU and count
of each kind of process (its first three words), and the 25 tests whose processes took the most
CPU. A process's last look is at most INTERVAL old: its CPU is undercounted by that much at most.
The sampler's own CPU (a few percent of a core) is printed too.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from nodus.runner.processes import procfs

PYTEST = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup"]
ML_RSS = 400 * 2**20
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class Sampler(threading.Thread):
    """The newest look at every process seen, keyed by (pid, start time): pids are reused."""

    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.since = _started(os.getpid())  # only what started after this script counts
        self.seen: dict[tuple[int, int], dict] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval):
            for pid in procfs.pids():
                if pid != os.getpid():
                    self._look(pid)

    def _look(self, pid: int) -> None:
        entry = procfs.stat(pid)
        if entry is None or entry.starttime < self.since:
            return  # gone since the listing, or there before the command
        record = self.seen.get((pid, entry.starttime))
        if record is None:
            test = procfs.environ_value(pid, "PYTEST_CURRENT_TEST") or ""
            record = {"test": test.rsplit(" (", 1)[0], "ml": False}  # without "(call)"
            self.seen[pid, entry.starttime] = record
        command = procfs.command_line(pid)  # the newest: a forked child becomes its program
        if command:
            record["command"] = command[:300]
        record["cpu"] = entry.cpu_ticks / TICK
        record["ml"] = record["ml"] or entry.rss_pages * PAGE > ML_RSS


def _started(pid: int) -> int:
    entry = procfs.stat(pid)
    assert entry is not None  # this very process
    return entry.starttime


def kind(command: str) -> str:
    """A process's kind: its first three words, paths cut to their last part."""
    return " ".join(word.rsplit("/", 1)[-1] for word in command.split()[:3])


def report(records: list[dict], wall: float, own_cpu: float) -> None:
    total = sum(r["cpu"] for r in records)
    ml = [r for r in records if r["ml"]]
    ml_cpu = sum(r["cpu"] for r in ml)
    print(f"wall {wall:.0f} s; CPU of {len(records)} processes {total:.0f} s")
    print(f"ML processes: {len(ml)}, {ml_cpu:.0f} s of CPU ({ml_cpu / max(len(ml), 1):.1f} s each)")
    print(f"the sampler's own CPU: {own_cpu:.0f} s\n\nCPU s  count  kind")
    by_kind: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for r in records:
        label = ("ML " if r["ml"] else "   ") + kind(r.get("command", ""))
        by_kind[label] += r["cpu"]
        counts[label] += 1
    for label, cpu in by_kind.most_common(20):
        print(f"{cpu:6.0f} {counts[label]:6d}  {label}")
    print("\nCPU s  ML  test")
    by_test: collections.Counter[str] = collections.Counter()
    ml_count: collections.Counter[str] = collections.Counter()
    for r in records:
        by_test[r["test"] or "-"] += r["cpu"]
        ml_count[r["test"] or "-"] += r["ml"]
    for test, cpu in by_test.most_common(25):
        print(f"{cpu:6.0f} {ml_count[test]:3d}  {test[:140]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--save", help="write every process's record here (JSON lines)")
    parser.add_argument("command", nargs="*", help="what to run (default: the whole suite)")
    args = parser.parse_args()
    sampler = Sampler(args.interval)
    sampler.start()
    started = time.monotonic()
    status = subprocess.call(args.command or PYTEST)
    wall = time.monotonic() - started
    sampler.done.set()
    sampler.join()
    records = [r for r in sampler.seen.values() if r["cpu"]]
    own = resource.getrusage(resource.RUSAGE_SELF)
    if args.save:
        Path(args.save).write_text("".join(json.dumps(r) + "\n" for r in records))
    report(records, wall, own.ru_utime + own.ru_stime)
    sys.exit(status)


if __name__ == "__main__":
    main()
