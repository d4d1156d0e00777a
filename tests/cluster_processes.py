"""The tests' own look at a cluster attempt's processes, on any of its nodes (every node of the
local test clusters is this machine): which process is a rank's program, and which still carry
a run's attempt token (a node's token is ``<run>:rank<k>/…``). A scan of /proc of its own, so a
sweep that overlooks a process cannot hide it here."""

from __future__ import annotations

import os
from pathlib import Path


def rank_process(program: str, rank: int) -> int:
    """The pid of the process running ``program`` whose environment says ``RANK=rank``."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            command = Path(f"/proc/{name}/cmdline").read_bytes()
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if program.encode() in command and f"RANK={rank}".encode() in environ:
            return int(name)
    raise AssertionError(f"no {program} process of rank {rank}")


def token_carriers(run_id: str) -> dict[int, str]:
    """{pid: command line} of living processes carrying an attempt token of the run."""
    from nodus.runner.processes.containment import TOKEN_VAR

    marker = f"{TOKEN_VAR}={run_id}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(e.startswith(marker) for e in environ):
            found[int(name)] = command.decode(errors="replace")
    return found
