"""The kernel's process-events connector as the supervisor reads it (needs CAP_NET_ADMIN).

A process killed and reaped at once by its parent leaves nothing in /proc to read; its exit
event still tells its pid, its wait status and its parent.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess

import pytest

from nodus.runner.processes import procevents


@pytest.fixture
def events():
    opened = procevents.open_events()
    if opened is None:
        pytest.skip("the kernel's process events need CAP_NET_ADMIN in the initial namespaces")
    yield opened
    opened.close()


def test_a_child_killed_and_reaped_at_once_is_told_with_its_signal_and_parent(events):
    # The shell waits on its child: the child is reaped the moment it dies.
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 30 & echo $!; kill -9 $!; wait $!; exit 0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(shell.communicate(timeout=30)[0])
    assert shell.returncode == 0
    assert not os.path.exists(f"/proc/{child}")  # nothing left to read there

    told = _exits_until(events, lambda exits: any(pid == child for pid, _, _ in exits))

    status, parent = next((raw, parent) for pid, raw, parent in told if pid == child)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert parent in (shell.pid, 0)  # 0: the kernel tells no parent once it is reaped


def test_a_read_takes_at_most_its_limit_and_leaves_the_rest_queued(events):
    shells = [subprocess.Popen(["sh", "-c", "exit 3"]) for _ in range(3)]
    pids = {shell.pid for shell in shells if shell.wait() == 3}
    assert select.select([events], [], [], 10)[0]

    first = events.exits(1)
    assert len(first) <= 1  # one datagram read, however many wait
    told = _exits_until(events, lambda exits: pids <= {pid for pid, _, _ in exits}, first)
    assert {os.waitstatus_to_exitcode(raw) for pid, raw, _ in told if pid in pids} == {3}


def _exits_until(events, done, seen=()) -> list[tuple[int, int, int]]:
    seen = list(seen)
    while not done(seen):
        assert select.select([events], [], [], 10)[0], f"no exit event came: {seen}"
        seen += events.exits(64)
    return seen
