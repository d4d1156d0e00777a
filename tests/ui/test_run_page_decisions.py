"""The decisions behind a run's page, as tables: the banner (which colour, which sentences, each
said once), the events' grouping and their details as fields, the program's own arguments,
the GPU table ``nvidia-smi`` prints, CPU use, and a running attempt read from ``/proc``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from nodus.inventory import resources
from nodus.inventory.resources import CpuMeter, attempt_use, cpu_percent, parse_gpu_csv
from nodus.ui.pages.banner import banner
from nodus.ui.pages.events import Group, detail_fields, grouped
from nodus.ui.pages.run import _stored
from nodus.ui.pages.what_ran import gpu_text, program_arguments, what_ran_section

MIB = 1024 * 1024


def _attempt(number, outcome, detail=None, restored_step=None):
    return {
        "number": number,
        "outcome": outcome,
        "detail": detail,
        "restored_step": restored_step,
        "restored_capture": None,
    }


def _run(phase, attempts, message=None, recoveries=0, finished=True, failures=0):
    return {
        "phase": phase,
        "message": message,
        "finished_at": "2026-12-06T10:00:00Z" if finished else None,
        "protection": None,
        "capture_failures": {
            "count": failures,
            "reasons": ["disk full"] * failures,
            "newest_committed_step": 10,
        },
        "stages": [{"name": "main", "recoveries": recoveries, "attempts": attempts}],
    }


KILLED = "killed by SIGKILL, which nodus did not send"
EXITED = "python exited with status 1"


@pytest.mark.parametrize(
    ("run", "kind", "sentences"),
    [
        # succeeded after a recovery: green, naming the recovery and what it continued from
        (
            _run(
                "SUCCEEDED",
                [_attempt(1, "lost", KILLED), _attempt(2, "succeeded", None, 15)],
                recoveries=1,
            ),
            "recovered",
            (
                "SUCCEEDED after 1 recovery",
                f"main attempt 1 lost: {KILLED}; attempt 2 continued from step 15",
            ),
        ),
        # failed: the run's message is its attempt's detail: one sentence, with the phase
        (
            _run("FAILED", [_attempt(1, "failed", EXITED)], message=EXITED),
            "failure",
            (f"FAILED: main attempt 1 failed: {EXITED}",),
        ),
        # failed after a recovery that started over: each sentence once, the message first
        (
            _run(
                "FAILED",
                [_attempt(1, "lost", KILLED), _attempt(2, "failed", EXITED)],
                message=EXITED,
                recoveries=1,
            ),
            "failure",
            (
                f"FAILED: main attempt 2 failed: {EXITED}",
                f"main attempt 1 lost: {KILLED}; attempt 2 started over",
            ),
        ),
        # a message no attempt said: said as it is
        (
            _run("CANCELLED", [_attempt(1, "cancelled")], message="cancelled by nodus runs cancel"),
            "failure",
            ("CANCELLED: cancelled by nodus runs cancel",),
        ),
        # still recovering: amber, not red
        (
            _run("RECOVERING", [_attempt(1, "lost", KILLED)], recoveries=1, finished=False),
            "notice",
            (f"main attempt 1 lost: {KILLED}",),
        ),
        # succeeded with a failed capture but no recovery: amber
        (
            _run("SUCCEEDED", [_attempt(1, "succeeded")], failures=1),
            "notice",
            ("1 capture(s) failed (disk full); newest committed step: 10",),
        ),
    ],
)
def test_the_banner_tells_a_recovery_that_succeeded_from_a_failure(run, kind, sentences):
    said = banner(run)
    assert said is not None and (said.kind, said.sentences) == (kind, sentences)


@pytest.mark.parametrize(
    "run",
    [
        _run("SUCCEEDED", [_attempt(1, "succeeded")]),
        _run("PAUSED", [_attempt(1, "paused", "paused by nodus runs pause")]),
        _run("RUNNING", [_attempt(1, None)], finished=False),
    ],
)
def test_a_run_with_nothing_to_say_has_no_banner(run):
    assert banner(run) is None


def _event(type_, at, **details):
    return {"type": type_, "at": at, "stage": "main", "attempt": 1, **details}


def test_retention_deletions_are_one_group_where_the_newest_of_them_stands():
    events = [
        _event("snapshot_committed", "t1", step=5),
        _event("snapshot_kind_deleted", "t2", step=5, kind="state"),
        _event("snapshot_committed", "t3", step=10),
        _event("snapshot_kind_deleted", "t4", step=10, kind="state"),
        _event("phase", "t5", phase="SUCCEEDED"),
    ]
    rows = grouped(events)
    assert [row.type if isinstance(row, Group) else row["type"] for row in rows] == [
        "phase",
        "snapshot_kind_deleted",
        "snapshot_committed",
        "snapshot_committed",
    ]
    group = rows[1]
    assert isinstance(group, Group)
    assert [e["at"] for e in group.events] == ["t4", "t2"] and group.label == (
        "2 retention deletions"
    )
    assert grouped([events[1]])[0].label == "1 retention deletion"


@pytest.mark.parametrize(
    ("details", "fields"),
    [
        ({"step": 40, "snapshot": "ckpt_1"}, [("snapshot", "ckpt_1"), ("step", "40")]),
        ({"overhead": 0.0123456, "every": 8}, [("every", "8"), ("overhead", "0.01235")]),
        ({"counted": True, "error": None}, [("counted", "yes"), ("error", "–")]),
        ({"reasons": ["a", "b"]}, [("reasons", "a, b")]),
        ({"save": {"step": 3, "kind": "full"}}, [("save.kind", "full"), ("save.step", "3")]),
        ({"arguments": {f"a{i}": i for i in range(40)}}, [("arguments", "40 entries")]),
        ({}, []),
    ],
)
def test_event_details_read_as_key_value_fields(details, fields):
    assert detail_fields(_event("x", "t", **details)) == fields


@pytest.mark.parametrize(
    ("command", "python", "arguments"),
    [
        (["python", "train.py", "--lr", "3e-4"], True, ["--lr", "3e-4"]),
        (["python", "-u", "train.py", "--epochs", "3"], True, ["--epochs", "3"]),
        (["python", "-m", "pkg.train", "--epochs", "3"], True, ["--epochs", "3"]),
        (
            ["torchrun", "--nproc-per-node", "2", "train.py"],
            False,
            ["--nproc-per-node", "2", "train.py"],
        ),
        (["./train.sh"], False, []),
    ],
)
def test_the_programs_own_arguments_follow_its_script(command, python, arguments):
    assert program_arguments(command, python) == arguments


# In the shape ``nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
# --format=csv,noheader,nounits`` prints (a GPU that reports no utilization says [N/A]).
NVIDIA_SMI = """\
0, NVIDIA H100 80GB HBM3, 87, 40960, 81559
1, NVIDIA H100 80GB HBM3, 0, 4, 81559
2, NVIDIA A10G, [N/A], [N/A], 23028
No devices were found
"""


def test_the_gpu_table_of_nvidia_smi_is_read_field_by_field():
    assert parse_gpu_csv(NVIDIA_SMI) == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "utilization": 87.0,
            "memory_used": 40960 * MIB,
            "memory_total": 81559 * MIB,
        },
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "utilization": 0.0,
            "memory_used": 4 * MIB,
            "memory_total": 81559 * MIB,
        },
        {
            "index": 2,
            "name": "NVIDIA A10G",
            "utilization": None,
            "memory_used": None,
            "memory_total": 23028 * MIB,
        },
    ]
    assert parse_gpu_csv("") == parse_gpu_csv("No devices were found\n") == []
    shown = gpu_text(parse_gpu_csv(NVIDIA_SMI)).split("; ")
    assert shown[0] == "GPU 0 NVIDIA H100 80GB HBM3: 87% busy, 40.0 GiB of 79.6 GiB"
    assert shown[2] == "GPU 2 NVIDIA A10G: –, memory –"
    assert gpu_text(None) == "none seen"


@pytest.mark.parametrize(
    ("ticks", "seconds", "hertz", "percent"),
    [(100, 1.0, 100, 100.0), (400, 2.0, 100, 200.0), (0, 2.0, 100, 0.0), (5, 0.0, 100, None)],
)
def test_cpu_use_is_a_share_of_one_core(ticks, seconds, hertz, percent):
    assert cpu_percent(ticks, seconds, hertz) == percent


@pytest.mark.parametrize(
    ("stored", "said"),
    [
        (
            {"bytes": 1024, "roles": {"checkpoint": 8, "source": 1, "outputs": 1}},
            "8 checkpoints, the source and the outputs: 1.0 KiB",
        ),
        ({"bytes": 0, "roles": {"source": 1}}, "0 checkpoints and the source: 0 B"),
        ({"bytes": 0, "roles": {"checkpoint": 1}}, "1 checkpoint: 0 B"),
    ],
)
def test_the_stored_count_names_the_source_apart_from_checkpoints(stored, said):
    assert _stored(stored) == said


def test_a_running_attempt_is_read_from_proc_and_no_gpu_is_no_error(monkeypatch):
    """This process's child, a real one, read as a running attempt's program: its CPU, its
    memory, its tree; with no ``nvidia-smi`` on PATH there is no GPU line and no error."""
    monkeypatch.setenv("PATH", "/nonexistent")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"  # running
        attempt = {"pid": child.pid, "outcome": None, "host": socket.gethostname()}
        meter = CpuMeter()
        before = time.monotonic()
        use = attempt_use(attempt, meter)
        assert use is not None
        assert use["pid"] == child.pid and use["processes"] == 1
        assert use["memory_bytes"] > 1024 * 1024  # an interpreter's resident pages
        assert use["cpu_percent"] is not None and use["cpu_percent"] >= 0
        assert use["gpus"] is None
        again = attempt_use(attempt, meter)  # the second look measures since the first
        assert again is not None and again["cpu_seconds_over"] <= time.monotonic() - before
        assert attempt_use({**attempt, "host": "elsewhere"}, meter) is None
        assert attempt_use({**attempt, "outcome": "lost"}, meter) is None
    finally:
        child.communicate(b"")
    assert attempt_use({"pid": child.pid, "outcome": None, "host": None}) is None  # reaped
    assert resources.gpus() is None and os.environ["PATH"] == "/nonexistent"


def test_a_methods_settings_are_shown_as_nodus_resolved_them():
    """A managed method's run: its resolved ``[method]`` settings, one row each."""
    from browser import Dom

    run = {
        "stages": [{"name": "train", "launch": None, "attempts": []}],
        "events": [],
    }
    workload = {
        "method": {"name": "sft", "learning_rate": 2e-5, "dataset": "data.jsonl"},
        "stages": [{"name": "train", "command": ["python", "-m", "nodus.stages.methods.train"]}],
    }
    page = Dom(f"<body>{what_ran_section(run, workload)}</body>")
    (settings,) = page.find("details", "method")
    rows = {page.cells(r)[0]: page.cells(r)[1] for r in page.inside(settings, "tr", "argument")}
    assert rows == {"dataset": "data.jsonl", "learning_rate": "2e-05", "name": "sft"}
