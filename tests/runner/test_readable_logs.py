"""Logs people can read: a program that draws progress bars (carriage-return frames, cursor
escapes) shows, in `nodus run`'s stream, `runs logs` and `runs logs -f`, the lines a terminal
would leave; `runs logs --raw` gives its bytes as written. And every log `nodus run` writes,
a terminal or not, says each committed snapshot (`--quiet` drops those lines)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from programs.progress_bars import RAW, SHOWN

PROGRAM = Path(__file__).parent / "programs" / "progress_bars.py"


def _bars(project) -> None:
    project.write(command=[sys.executable, str(PROGRAM), str(project.gate)])


def test_bars_show_their_last_frame_in_the_stream_and_in_runs_logs(project):
    _bars(project)
    project.done_killing()  # the program ends as soon as it has drawn its bars
    proc = project.nodus("run", "workload.toml", "--key", "bars")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"[main] {line}" for line in SHOWN] + ["[main] done"]
    logs = project.nodus("runs", "logs", "bars")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == ["==> main, attempt 1 <==", *SHOWN, "done"]
    as_json = project.nodus("runs", "logs", "bars", "--json")
    assert [json.loads(line)["line"] for line in as_json.stdout.splitlines()] == [*SHOWN, "done"]


def test_runs_logs_raw_gives_every_byte_the_program_wrote(project):
    _bars(project)
    project.done_killing()
    assert project.nodus("run", "workload.toml", "--key", "raw").returncode == 0
    raw = subprocess_bytes(project, "runs", "logs", "raw", "--raw")
    assert raw.stdout == (RAW + "done\n").encode()
    assert raw.stderr.decode().strip() == "==> main, attempt 1 <=="  # off the bytes
    both = project.nodus("runs", "logs", "raw", "--raw", "--json")
    assert both.returncode == 2
    assert "--raw prints the bytes as written, --json the lines shown: give one" in both.stderr


def test_runs_logs_follow_shows_a_live_run_s_bars_collapsed(project):
    _bars(project)
    assert project.nodus("run", "workload.toml", "--key", "live", "--detach").returncode == 0
    follower = project.start("runs", "logs", "live", "-f")
    assert follower.stdout is not None
    seen = []
    while not seen or seen[-1] != SHOWN[-1]:  # all it drew so far, while it waits on the gate
        line = follower.stdout.readline()
        assert line, f"runs logs -f ended early: {seen} {follower.stderr.read()}"
        seen.append(line.rstrip("\n"))
    project.done_killing()
    rest, err = follower.communicate(timeout=120)
    assert follower.returncode == 0, err
    assert seen == ["==> main, attempt 1 <==", *SHOWN]
    assert rest.splitlines() == ["done"]


def test_every_committed_snapshot_is_a_line_off_a_terminal_unless_quiet(project):
    project.write(steps=20, save_every=5, sleep=0.05)
    said = project.nodus("run", "workload.toml", "--key", "cron")  # stderr is a pipe, as cron's
    assert said.returncode == 0, said.stderr
    lines = [line for line in said.stderr.splitlines() if "committed (ckpt_" in line]
    run_id = project.get("cron")["id"]
    events = project.catalog().events(run_id, types=("snapshot_committed",))
    assert lines == [
        f"nodus: snapshot of step {e['details']['step']} committed ({e['details']['snapshot']})"
        for e in events
    ]
    assert lines and lines[-1].startswith("nodus: snapshot of step 20 committed")
    quiet = project.nodus("run", "workload.toml", "--key", "cron-quiet", "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "snapshot of step" not in quiet.stderr


def subprocess_bytes(project, *args: str):
    import subprocess

    from runner_helpers import NODUS

    return subprocess.run(
        [*NODUS, *args], cwd=project.root, env=project.env(), capture_output=True, timeout=120
    )
