"""The directory-contract watcher: a checkpoint folder is reported once, after it settles."""

from __future__ import annotations

from nodus.stages.directory import DirectoryWatcher


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_folder_is_reported_once_after_it_stops_changing(tmp_path):
    clock = Clock()
    watcher = DirectoryWatcher(str(tmp_path), settle_s=1.0, clock=clock)
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"1")
    assert watcher.poll() == []
    clock.now = 0.6
    (folder / "b.bin").write_bytes(b"22")  # still being written: the wait starts again
    assert watcher.poll() == []
    clock.now = 1.2
    assert watcher.poll() == []
    clock.now = 1.7
    assert watcher.poll() == [10]
    clock.now = 5.0
    assert watcher.poll() == []


def test_other_names_and_already_handled_steps_are_ignored(tmp_path):
    clock = Clock()
    for name in ("checkpoint-5", "checkpoint-7", "checkpoint-x", "notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    watcher = DirectoryWatcher(str(tmp_path), settle_s=0.5, seen={5}, clock=clock)
    watcher.poll()
    clock.now = 1.0
    assert watcher.poll() == [7]
