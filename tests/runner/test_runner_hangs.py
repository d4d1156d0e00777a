"""Hangs end and recover (``[execution] hang_timeout``), under the directory contract.

A program that stops making progress after a few saves is ended (its whole tree) once the
stage's ``hang_timeout`` passes, the attempt is an interruption, and the run recovers from the
newest snapshot and ends with the result of an uninterrupted run. A slow program that keeps
printing is never ended. A world of two processes whose rank 1 stops before a collective (rank
0 blocks in it) is ended whole and recovered. Bad values are refused before anything runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from runner_helpers import pid_alive, token_carriers

from nodus.runner.processes.containment import attempt_token
from nodus.testing.counter import expected_value
from polling import wait_for

PROGRAMS = Path(__file__).parent / "programs"
TORCHRUN = Path(sys.executable).with_name("torchrun")
HANGS = '\n[execution]\nhang_timeout = "{timeout}"\ngrace_period = 2\n'


def _events(run: dict, kind: str) -> list[dict]:
    return [e for e in run["events"] if e["type"] == kind]


def _recovered_from_the_newest(project, key: str, saves_before: list[int]) -> dict:
    """The run ended SUCCEEDED after one hang: attempt 1 interrupted as hung, attempt 2
    restored the newest snapshot attempt 1 committed."""
    run = project.get(key)
    assert run["phase"] == "SUCCEEDED"
    first, second = run["stages"][0]["attempts"]
    assert first["outcome"] == "lost", first
    assert first["detail"].startswith("hung: no progress for "), first["detail"]
    assert second["outcome"] == "succeeded"
    assert second["restored_step"] == max(saves_before)
    (hang,) = _events(run, "hang_detected")
    assert hang["attempt"] == 1 and hang["timeout_seconds"] == 3
    assert hang["seconds_without_progress"] >= 3
    assert hang["final_snapshot_step"] is None
    assert f"(last: {hang['last_progress']})" in first["detail"]
    return run


def test_a_program_that_stops_after_a_few_saves_is_ended_and_recovers_equal(project):
    steps = 40
    command = [sys.executable, str(PROGRAMS / "hanging_counter.py"), "2"]
    command += ["--steps", str(steps), "--save-every", "10", "--sleep", "0.02"]
    project.write(command=command, body=HANGS.format(timeout="3s"))
    proc = project.nodus("run", "workload.toml", "--key", "hang", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "nodus: no progress for " in proc.stdout and "ending it as hung" in proc.stdout
    assert "nodus: attempt 1 lost (pid " in proc.stderr
    assert "): hung: no progress for " in proc.stderr
    run_id = project.get("hang")["id"]
    saved = [
        e["step"] for e in _events(project.get("hang"), "snapshot_committed") if e["attempt"] == 1
    ]
    assert saved[:2] == [10, 20]
    _recovered_from_the_newest(project, "hang", [10, 20])
    assert project.result(run_id) == {"steps": steps, "value": expected_value(steps)}
    # the terminal said it; so do `runs get` in words and the UI's run page
    said = project.nodus("runs", "get", "hang")
    assert "hung: no progress for " in said.stdout
    page = str(_run_page(project, run_id).live)
    assert "main attempt 1 lost: hung: no progress for " in page
    assert "hang_detected at " in page  # marked on the attempt's bar


def _run_page(project, run_id: str):
    from nodus import Client
    from nodus.ui.pages.run import run_page

    return run_page(Client(str(project.home), read_only=True), run_id)


def test_a_slow_program_that_keeps_printing_is_never_ended(project):
    # a line every 0.5 s, a timeout of 4 s: 8 lines of margin on a loaded machine; 12 lines
    # outlast the timeout twice over
    command = [sys.executable, str(PROGRAMS / "slow_printer.py"), "12", "0.5"]
    project.write(command=command, body=HANGS.format(timeout="4s"))
    proc = project.nodus("run", "workload.toml", "--key", "slow", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = project.get("slow")
    assert run["phase"] == "SUCCEEDED"
    assert [a["outcome"] for a in run["stages"][0]["attempts"]] == ["succeeded"]
    assert not _events(run, "hang_detected")
    assert "slow: still working (12 of 12)" in proc.stdout


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torch (torchrun) is not installed")
def test_a_world_whose_rank_hangs_in_a_collective_is_ended_whole_and_recovers(project):
    steps = 30
    launcher = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2"]
    command = [*launcher, str(PROGRAMS / "collective_hang.py"), str(steps), "5", "10"]
    project.write(command=command, body=HANGS.format(timeout="3s"))
    runner = project.start("run", "workload.toml", "--key", "world")
    run_id = wait_for(
        lambda: project.home.exists() and project.catalog().find_by_key("world"), "the run"
    ).id
    # attempt 1's processes, seen while it hangs: every one is gone once it has ended
    first = attempt_token(run_id, "main", 1)
    seen: set[int] = set()

    def hanging() -> bool:
        seen.update(
            pid
            for pid, _ in token_carriers(run_id).items()
            if _token_of(pid) == first and "collective_hang.py" in _
        )
        return bool(project.catalog().events(run_id, types=("hang_detected",)))

    wait_for(hanging, "the hang to be detected", runner)
    assert len(seen) >= 3  # torchrun and its two ranks
    out, err = runner.communicate(timeout=300)
    assert runner.returncode == 0, out[-3000:] + err[-3000:]
    assert not [pid for pid in seen if pid_alive(pid)]
    assert not [pid for pid in token_carriers(run_id) if _token_of(pid) == first]
    _recovered_from_the_newest(project, "world", [5, 10])
    assert project.result(run_id) == {"steps": steps, "value": expected_value(steps)}


def _token_of(pid: int) -> str | None:
    from nodus.runner.processes.containment import TOKEN_VAR

    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            for entry in handle.read().split(b"\0"):
                if entry.startswith(f"{TOKEN_VAR}=".encode()):
                    return entry.split(b"=", 1)[1].decode()
    except OSError:
        return None
    return None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('"0s"', 'above 0 seconds (use "off" for none)'),
        ("-5", 'above 0 seconds (use "off" for none)'),
        ('"soon"', 'give "auto", "off" or a duration'),
        ("true", 'give "auto", "off" or a duration'),
    ],
)
def test_a_bad_hang_timeout_is_refused_with_exit_2_and_no_traceback(project, value, says):
    project.write(body=f"\n[execution]\nhang_timeout = {value}\n")
    for command in (("validate",), ("run",)):
        proc = project.nodus(*command, "workload.toml")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        assert "execution.hang_timeout" in proc.stderr and says in proc.stderr


def test_hang_timeout_resolves_as_written():
    """``nodus resolve``: a duration as seconds, the words as they are; the JSON Schema admits
    what the model admits."""
    from nodus.schemas.models import Execution

    assert Execution(hang_timeout="90s").hang_timeout == 90.0
    assert Execution(hang_timeout=2).hang_timeout == 2.0
    assert Execution(hang_timeout="off").hang_timeout == "off"
    assert Execution().hang_timeout == "auto"
    schema = json.dumps(Execution.model_json_schema()["properties"]["hang_timeout"])
    assert '"auto"' in schema and '"off"' in schema and "exclusiveMinimum" in schema
