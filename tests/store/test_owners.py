"""Flag owners: a flag whose owner is certainly gone is ignored at once, any other waits out
its lease. Real processes: one running, one exited and not yet reaped, one reaped."""

from __future__ import annotations

import subprocess
import sys

from nodus.store.owners import gone, me
from polling import wait_for


def _child() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )


def _stat(pid: int) -> list[str]:
    """Fields 3 onwards of /proc/<pid>/stat: state first, start time at index 19."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rpartition(")")[2].split()


def _owner_of(child: subprocess.Popen) -> dict:
    """What the child would have written as the owner of its flags."""
    return {**me(), "pid": child.pid, "started": int(_stat(child.pid)[19])}


def test_a_running_owner_is_not_gone_and_an_exited_one_is():
    child = _child()
    owner = _owner_of(child)
    assert not gone(owner) and not gone(me())
    child.stdin.close()  # the child exits; until it is reaped only its zombie is left
    wait_for(lambda: _stat(child.pid)[0] == "Z", what="the child's zombie")
    assert gone(owner)
    child.wait()
    assert gone(owner)


def test_a_pid_now_running_another_process_is_gone():
    child = _child()
    try:
        assert gone({**_owner_of(child), "started": _owner_of(child)["started"] - 1})
    finally:
        child.stdin.close()
        child.wait()


def test_owners_that_cannot_be_told_apart_are_left_to_the_lease():
    assert not gone({**me(), "machine": "another-boot/4026531836"})  # another machine
    assert not gone({**me(), "started": None})  # this pid, start time unknown
    assert not gone({"pid": 1}) and not gone(None) and not gone("pid 1")
