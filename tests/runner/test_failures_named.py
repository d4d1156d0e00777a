"""Failures named as they are: a full disk, a read-only home, a home that is a file, store URLs
that cannot work, a workload path that is no file. Never "damaged", never "move it aside",
never an internal error; refusals of input exit 2 with one line.

The full and read-only disks are real: a small tmpfs mounted for the test (as root), remounted
read-only; elsewhere those tests are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodus import protocol
from nodus.runner.capture.disk_guard import DiskGuard

NODUS = [sys.executable, "-m", "nodus"]
MISNAMED = ("damaged", "move it aside", "internal error", "Traceback")


def nodus(*args: str, home: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, NODUS_HOME=str(home), NODUS_SETTLE_S="0.2")
    env.pop("NODUS_STORE", None)
    return subprocess.run(
        [*NODUS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs of the test's own; skipped where mounting one is not allowed."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "w.toml").write_text(
        'name = "c"\ncommand = ["python", "-m", "nodus.testing.counter", "--steps", "20", '
        '"--save-every", "5", "--state-bytes", "3000000"]\noutputs = ["out"]\n'
    )
    return root


def _fill(disk: Path) -> None:
    """Write until the disk refuses: ENOSPC from now on."""
    with open(disk / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        except OSError:
            pass


@pytest.mark.slow  # starts real `nodus` processes
def test_a_full_disk_is_named_a_full_disk(small_disk, tmp_path):
    home = small_disk / "home"
    project = _project(tmp_path / "project")
    assert nodus("runs", "list", home=home, cwd=project).returncode == 0  # the catalog exists
    _fill(small_disk)
    proc = nodus("run", "w.toml", home=home, cwd=project)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "full" in said or "No space left on device" in said, said
    assert not any(word in said for word in MISNAMED), said


@pytest.mark.slow  # starts real `nodus` processes
def test_a_read_only_home_is_named_read_only(small_disk, tmp_path):
    home = small_disk / "home"
    project = _project(tmp_path / "project")
    assert nodus("runs", "list", home=home, cwd=project).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    proc = nodus("run", "w.toml", home=home, cwd=project)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "read-only" in said, said
    assert not any(word in said for word in MISNAMED), said


def test_the_disk_guard_survives_a_disk_too_full_to_tell_the_program(tmp_path, monkeypatch):
    events = []
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the control folder lies "inside" a file: every write fails
    guard = DiskGuard(
        str(tmp_path),
        protocol.ControlPaths(str(blocked / ".nodus")),
        lambda kind, details: events.append((kind, details)),
    )
    monkeypatch.setenv("NODUS_FREE_BYTES", "10")
    assert guard.admits(True, lambda: 100) is False
    monkeypatch.delenv("NODUS_FREE_BYTES")
    assert [kind for kind, _details in events] == ["checkpoint_disabled_disk"]
    assert guard.admits(True, lambda: 1) is False  # off for the rest of the attempt
    assert guard.admits(False, lambda: 1) is True  # the final save still goes ahead


@pytest.mark.slow  # starts real `nodus` processes
@pytest.mark.parametrize(
    "args, words",
    [
        (["--store", "ftp://127.0.0.1:1/store"], "cannot reach it"),
        (["--store", "file://relative/store"], "absolute path"),
        (["--store", "nosuchscheme://x"], "store URL"),
    ],
)
def test_a_store_url_that_cannot_work_is_refused_in_one_line(tmp_path, args, words):
    project = _project(tmp_path / "project")
    proc = nodus(*args, "run", "w.toml", home=tmp_path / "home", cwd=project)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (project / "relative").exists()  # no store made relative to the folder


@pytest.mark.slow  # starts real `nodus` processes
def test_a_home_that_is_a_file_is_refused_in_one_line(tmp_path):
    project = _project(tmp_path / "project")
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    proc = nodus("runs", "list", home=home, cwd=project)
    assert proc.returncode == 2 and "not a folder" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # starts real `nodus` processes
@pytest.mark.parametrize("command", ["validate", "run", "resolve"])
def test_a_workload_path_that_is_no_regular_file_is_refused_not_waited_on(tmp_path, command):
    project = _project(tmp_path / "project")
    os.mkfifo(project / "fifo.toml")
    proc = nodus(command, "fifo.toml", home=tmp_path / "home", cwd=project, timeout=60)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
