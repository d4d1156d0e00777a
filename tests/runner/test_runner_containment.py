"""Containment with real processes and real signals: nothing an attempt starts outlives it.

Every run here starts its program through a two-level launcher (``sh -c`` running ``sh -c``
running ``python tree.py``), and the program starts a child that ignores SIGTERM and a helper
that double forks, calls ``setsid`` and ignores SIGTERM too, before it counts. After each way an
attempt can end, no process carrying one of the run's attempt tokens is alive (the test scans
/proc itself), and a recovered run ends with the result of an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import textwrap

from runner_helpers import committed_steps, token_carriers

from nodus.protocol import ENV_ATTEMPT_TOKEN as TOKEN_VAR
from nodus.testing.counter import expected_value
from polling import wait_for

STEPS, SAVE_EVERY, SLEEP = 300, 10, 0.01
GRACE = 1  # seconds between SIGTERM and SIGKILL for the processes that ignore SIGTERM

TREE = textwrap.dedent("""
    import os, subprocess, sys
    from nodus.testing import counter

    STUBBORN = "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(3600)"
    subprocess.Popen([sys.executable, "-c", STUBBORN])
    if os.fork() == 0:  # a helper daemon: double fork + setsid, out of the program's group
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", STUBBORN, "daemon"])
        os._exit(0)
    os.wait()
    sys.exit(counter.main(sys.argv[1:]))
""")
# The launchers, the program, its stubborn child and the daemon, and the supervisor.
TREE_SIZE = 6


def _write(project) -> None:
    (project.root / "tree.py").write_text(TREE)
    program = [sys.executable, "tree.py", "--steps", str(STEPS), "--save-every", str(SAVE_EVERY)]
    program += ["--sleep", str(SLEEP)]
    inner = shlex.join(program) + "; exit $?"  # `; exit` keeps each shell as a parent
    outer = f"sh -c {shlex.quote(inner)}; exit $?"
    project.write(command=["sh", "-c", outer], body=f"[execution]\ngrace_period = {GRACE}\n")


def _started_tree(project, key: str):
    """Start `nodus run --key KEY`; the runner and run id once the whole tree runs."""
    _write(project)
    runner = project.start("run", "workload.toml", "--key", key)
    runner.log_path = os.devnull
    run = wait_for(lambda: project.home.exists() and project.catalog().find_by_key(key), "run")
    wait_for(lambda: committed_steps(project, run.id), "a first snapshot")
    carriers = wait_for(
        lambda: (found := token_carriers(run.id)) and len(found) >= TREE_SIZE and found,
        "the attempt's whole tree",
    )
    assert any(command.endswith("daemon") for command in carriers.values()), carriers
    return runner, run.id


def _orphan_the_tree(project, runner, run_id: str) -> set[int]:
    """SIGKILL the runner and the attempt's supervisor: what they started is left running.

    Returns the pids of the child and the daemon that ignore SIGTERM.
    """
    supervisor = _supervisor(run_id)
    os.kill(supervisor, signal.SIGSTOP)  # so it cannot act on the runner's death first
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=60)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: supervisor not in token_carriers(run_id), "the supervisor to die")
    left = token_carriers(run_id)
    # The program may end by itself now (its output has no reader); the stubborn two cannot.
    stubborn = {pid for pid, command in left.items() if "sleep(3600)" in command}
    assert len(stubborn) == 2, left
    return stubborn


def _supervisor(run_id: str) -> int:
    """The running attempt's supervisor: the parent of its program."""
    carriers = token_carriers(run_id)
    supervisors = {pid for pid, command in carriers.items() if SUPERVISOR in command}
    return next(
        parent
        for pid in carriers
        if (parent := _parent(pid)) in supervisors and pid not in supervisors
    )


SUPERVISOR = "nodus.runner.processes.supervisor"


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _result_is_uninterrupted(project, run_id: str) -> None:
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def test_a_sigkilled_runner_takes_the_whole_tree_along_and_run_key_recovers(project):
    runner, run_id = _started_tree(project, "k")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=60)
    wait_for(lambda: not token_carriers(run_id), "every process of the attempt to end")
    again = project.nodus("run", "workload.toml", "--key", "k")
    assert again.returncode == 0, again.stderr
    _result_is_uninterrupted(project, run_id)
    assert token_carriers(run_id) == {}  # the finished attempt's daemon is gone as well
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"]


def test_sigterm_to_the_runner_ends_the_whole_tree_before_it_exits(project):
    runner, run_id = _started_tree(project, "t")
    os.kill(runner.pid, signal.SIGTERM)
    runner.communicate(timeout=120)
    assert runner.returncode == 3
    assert token_carriers(run_id) == {}  # the runner exits only once the tree is gone
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    _result_is_uninterrupted(project, run_id)
    assert token_carriers(run_id) == {}


def test_cancelling_a_runnerless_run_kills_what_its_attempt_left(project):
    runner, run_id = _started_tree(project, "c")
    stubborn = _orphan_the_tree(project, runner, run_id)
    cancelled = project.nodus("runs", "cancel", "c", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["phase"] == "CANCELLED"
    assert token_carriers(run_id) == {}
    killed = _survivors_killed(project, run_id)
    assert stubborn <= {event["pid"] for event in killed}
    assert {event["attempt"] for event in killed} == {1}


def test_a_run_key_rerun_kills_the_survivors_before_its_new_attempt(project):
    runner, run_id = _started_tree(project, "r")
    stubborn = _orphan_the_tree(project, runner, run_id)
    again = project.nodus("run", "workload.toml", "--key", "r")
    assert again.returncode == 0, again.stderr
    _result_is_uninterrupted(project, run_id)
    assert token_carriers(run_id) == {}
    events = project.get(run_id)["events"]
    killed = [i for i, e in enumerate(events) if e["type"] == "survivor_killed"]
    assert stubborn <= {events[i]["pid"] for i in killed}
    second = min(i for i, e in enumerate(events) if e["attempt"] == 2)
    assert max(killed) < second  # every survivor was gone before attempt 2 began


def _survivors_killed(project, run_id: str) -> list[dict]:
    return [e for e in project.get(run_id)["events"] if e["type"] == "survivor_killed"]


def test_a_sigkilled_supervisor_is_an_interruption_and_its_tree_is_swept(project):
    runner, run_id = _started_tree(project, "s")
    supervisor = _supervisor(run_id)
    os.kill(supervisor, signal.SIGKILL)
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    _result_is_uninterrupted(project, run_id)
    assert token_carriers(run_id) == {}
    run = project.get(run_id)
    first = run["stages"][0]["attempts"][0]
    assert first["outcome"] == "lost" and "supervisor" in first["detail"]
    assert {e["attempt"] for e in run["events"] if e["type"] == "survivor_killed"} == {1}


def test_a_recovery_starts_after_the_killed_attempts_whole_tree_is_gone(project):
    """The program killed, its stubborn child and daemon go with the attempt before the next
    one starts: the supervisor stops and reaps the whole tree before it reports, so the
    recovery has nothing left to sweep (and skips the sweep)."""
    runner, run_id = _started_tree(project, "k")
    first = project.catalog().attempts(run_id, "main")[-1]
    os.kill(first["pid"], signal.SIGKILL)
    wait_for(
        lambda: (a := project.catalog().attempts(run_id, "main")) and len(a) == 2 and a[1]["pid"],
        "the next attempt's program",
    )
    assert _carrying(f"{run_id}/main/1") == {}
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    _result_is_uninterrupted(project, run_id)
    assert token_carriers(run_id) == {}
    assert not [e for e in project.get(run_id)["events"] if e["type"] == "survivor_killed"]


def _carrying(token: str) -> dict[int, str]:
    """{pid: command} of the living processes carrying exactly ``token``."""
    wanted = f"{TOKEN_VAR}={token}".encode()
    return {
        pid: command
        for pid, command in token_carriers(token.split("/")[0]).items()
        if wanted in _environ(pid)
    }


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def test_an_attempts_supervisor_carries_the_attempts_token_from_its_start(project):
    """The supervisor holds the token of the attempt it starts the program for: a sweep after
    the runner's death finds it like any process of the attempt."""
    program = "import os; print(open(f'/proc/{os.getppid()}/environ', 'rb').read().hex())"
    project.write(command=[sys.executable, "-c", program])
    proc = project.nodus("run", "workload.toml", "--key", "t")
    assert proc.returncode == 0, proc.stderr
    run_id = project.catalog().find_by_key("t").id
    printed = next(line for line in proc.stdout.splitlines() if line.startswith("[main] "))
    environ = bytes.fromhex(printed.removeprefix("[main] ")).split(b"\0")
    assert f"{TOKEN_VAR}={run_id}/main/1".encode() in environ
    assert token_carriers(run_id) == {}


def test_every_leaf_killed_after_the_first_snapshot_recovers(project):
    """A kill of every leaf process (as an OOM killer or a `kill` of the leaves may do) takes
    the program: the recovery's attempt starts under a supervisor of its own."""
    project.write(steps=60, save_every=10, sleep=0.05)
    runner = project.start("run", str(project.file), "--key", "l")
    runner.log_path = os.devnull
    run = wait_for(lambda: project.home.exists() and project.catalog().find_by_key("l"), "run")
    wait_for(lambda: committed_steps(project, run.id), "a first snapshot")
    leaves = _leaves(run.id)
    program = project.catalog().attempts(run.id, "main")[-1]["pid"]
    assert leaves == {program}, leaves
    for pid in leaves:
        os.kill(pid, signal.SIGKILL)
    _, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    assert project.result(run.id) == {"steps": 60, "value": expected_value(60)}
    got = project.get(run.id)
    outcomes = [a["outcome"] for a in got["stages"][0]["attempts"]]
    assert outcomes == ["lost", "succeeded"]
    assert token_carriers(run.id) == {}


def _leaves(run_id: str) -> set[int]:
    """The run's processes that have no child of the run: the program."""
    carriers = token_carriers(run_id)
    parents = {_parent(pid) for pid in carriers}
    return {pid for pid in carriers if pid not in parents}
