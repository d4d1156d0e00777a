"""The next attempt's copy laid out while an attempt trains (runner.workspace.ahead), real runs.

A recovery renames it into place instead of restoring the source on its way to the program; the
program must see exactly what a fresh restore gives it, whatever the killed attempt did to its
own copy, and nothing laid out by a runner that died is ever taken.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap

from runner_helpers import pid_alive, running_attempt

from nodus.runner.workspace.ahead import Ahead, lay_ahead
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults
from nodus.store import open_store
from nodus.store.manifest import SnapshotInfo
from polling import wait_for

DATA = "a data file the program must always see as captured\n"
CAPTURED_MTIME_NS = 1_600_000_000_123_456_789
RESTARTABLE = '[continuity]\nmode = "restartable"\nresume_on_interruption = true\n'

# Each attempt records what its copy holds in the stage's cache (which outlives attempts).
# Attempt 1 waits for the copy laid out ahead, notes its file, scribbles on its own copy, then
# either kills itself (an interruption) or waits for the test to kill its runner.
PROBE = textwrap.dedent("""
    import json, os, shutil, signal, sys, time
    attempt = os.environ["NODUS_ATTEMPT"]
    cache = os.environ["HF_HOME"]
    info = os.stat("data.txt")
    seen = {
        "inode": info.st_ino,
        "mtime_ns": info.st_mtime_ns,
        "data": open("data.txt").read(),
        "stray": os.path.exists("stray.txt"),
    }
    if attempt == "1":
        laid = os.path.join("..", "next", "data.txt")
        deadline = time.monotonic() + 60
        while not os.path.exists(laid) and time.monotonic() < deadline:
            time.sleep(0.02)
        seen["next_inode"] = os.stat(laid).st_ino if os.path.exists(laid) else None
        with open("data.txt", "a") as handle:  # in place: the copy's own file, not the source
            handle.write("scribbled by attempt 1\\n")
        open("stray.txt", "w").write("left in the copy by attempt 1")
    with open(os.path.join(cache, f"seen-{attempt}.json"), "w") as handle:
        json.dump(seen, handle)
    if attempt == "1":
        if sys.argv[1] == "interrupt":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)  # until the test kills the runner, which takes this program along
    os.makedirs("out", exist_ok=True)
    for name in os.listdir(cache):
        if name.startswith("seen-"):
            shutil.copy(os.path.join(cache, name), "out")
""")


def _project(project, how: str):
    (project.root / "probe.py").write_text(PROBE)
    data = project.root / "data.txt"
    data.write_text(DATA)
    os.utime(data, ns=(CAPTURED_MTIME_NS, CAPTURED_MTIME_NS))
    project.write(command=[sys.executable, "probe.py", how], body=RESTARTABLE)


def _seen(project, run_id: str) -> tuple[dict, dict]:
    store = project.store()
    target = project.root.parent / "o"
    store.restore(store.list(run=run_id, role="outputs")[-1].id, str(target))
    return tuple(json.loads((target / "out" / f"seen-{n}.json").read_text()) for n in (1, 2))


def _stage_folder(project, run_id: str):
    return project.home / "work" / run_id / "main"


def test_a_recovery_takes_the_copy_laid_out_ahead_which_holds_the_source_as_captured(project):
    _project(project, "interrupt")
    proc = project.nodus("run", "workload.toml", "--key", "ahead")
    assert proc.returncode == 0, proc.stderr
    run_id = project.get("ahead")["id"]
    first, second = _seen(project, run_id)

    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost", "succeeded"]
    assert second["inode"] == first["next_inode"]  # renamed into place, not restored again
    # ... and it is the source as captured, not what attempt 1 did to its own copy
    assert first["data"] == second["data"] == DATA
    assert first["mtime_ns"] == second["mtime_ns"] == CAPTURED_MTIME_NS
    assert not second["stray"]
    assert not (_stage_folder(project, run_id) / "next").exists()  # the stage's end removed it


def test_a_copy_laid_out_by_a_runner_that_died_is_never_taken(project):
    _project(project, "wait")
    runner = project.start("run", "workload.toml", "--key", "died")
    stage = wait_for(
        lambda: next((project.home / "work").glob("*/main"), None), what="the stage's folder"
    )
    laid = wait_for(
        lambda: (stage / "next" / "data.txt").exists() and stage / "next", what="the copy ahead"
    )
    wait_for(lambda: (stage / "cache" / "hf" / "seen-1.json").exists(), what="attempt 1")
    run_id = stage.parent.name
    program = running_attempt(project.catalog(), run_id)["pid"]
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    wait_for(lambda: not pid_alive(program), timeout=30, what="the program to die with it")
    # What the dead runner left is altered: a runner that took it would hand it on.
    (laid / "data.txt").chmod(0o644)
    (laid / "data.txt").write_text("altered after its runner died\n")
    (laid / "stray.txt").write_text("not of the source")

    again = project.nodus("run", "workload.toml", "--key", "died")
    assert again.returncode == 0, again.stderr
    _, second = _seen(project, run_id)
    assert second["data"] == DATA and second["mtime_ns"] == CAPTURED_MTIME_NS
    assert not second["stray"] and not os.path.exists(stage / "copy" / "stray.txt")
    assert not (stage / "next").exists()


# --- lay_ahead itself, on a real store -------------------------------------------------------


def _snapshot(store, folder, files: dict[str, bytes], role: str) -> str:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    info = SnapshotInfo(run="run_a", stage="main", attempt=1, step=None, role=role)
    return store.capture(str(folder), list(files), info=info).id


def test_lay_ahead_holds_the_source_under_the_outputs_with_the_copys_folders(tmp_path):

    store = open_store("file://" + str(tmp_path / "store"))
    source = _snapshot(store, tmp_path / "src", {"a.txt": b"source", "b.txt": b"b"}, "source")
    outputs = _snapshot(store, tmp_path / "out", {"a.txt": b"an earlier stage's"}, "outputs")
    ws = Workspace.of(str(tmp_path / "home"), "run_a", "main", 1)
    (tmp_path / "home" / "work" / "run_a" / "main" / "next").mkdir(parents=True)
    (tmp_path / "home" / "work" / "run_a" / "main" / "next" / "stale.txt").write_text("old")

    assert lay_ahead(store, ws, Ahead("main", source, (outputs,)))
    laid = tmp_path / "home" / "work" / "run_a" / "main" / "next"
    assert (laid / "a.txt").read_bytes() == b"an earlier stage's"  # the outputs lie over it
    assert (laid / "b.txt").read_bytes() == b"b"
    assert not (laid / "stale.txt").exists()  # whatever was there before is gone
    assert (laid / "state").is_dir() and (laid / ".nodus" / "requests").is_dir()

    assert ws.take_next() and not laid.exists()
    assert sorted(os.listdir(ws.copy)) == [".nodus", "a.txt", "b.txt", "state"]
    assert not ws.take_next()  # taken once


def test_a_source_too_large_to_hold_twice_is_not_laid_out_ahead(tmp_path, monkeypatch):

    store = open_store("file://" + str(tmp_path / "store"))
    source = _snapshot(store, tmp_path / "src", {"big.bin": b"x" * 4096}, "source")
    ws = Workspace.of(str(tmp_path / "home"), "run_a", "main", 1)
    monkeypatch.setattr(defaults, "LAY_AHEAD_MAX_BYTES", 4095)
    assert not lay_ahead(store, ws, Ahead("main", source, ()))
    assert not os.path.exists(ws.next)
    monkeypatch.setattr(defaults, "LAY_AHEAD_MAX_BYTES", 4096)
    assert lay_ahead(store, ws, Ahead("main", source, ()))


def test_a_source_the_store_cannot_restore_is_not_laid_out_ahead(tmp_path):

    store = open_store("file://" + str(tmp_path / "store"))
    source = _snapshot(store, tmp_path / "src", {"a.txt": b"a", "b.txt": b"b"}, "source")
    blob = next(
        p
        for p in (tmp_path / "store").rglob("*")
        if p.is_file() and p.stat().st_size == 1 and p.read_bytes() == b"b"
    )
    blob.chmod(0o644)
    blob.write_bytes(b"c")  # damaged: the same size, other bytes
    ws = Workspace.of(str(tmp_path / "home"), "run_a", "main", 1)
    assert not lay_ahead(store, ws, Ahead("main", source, ()))
    assert not os.path.exists(ws.next)  # nothing half laid out is left
