"""A download is said to be written only once it would survive a power loss: every file and
folder it wrote, and its folder's own entry, fsynced before it returns (tests/power cuts the
power during real downloads; this sees the order on one)."""

from __future__ import annotations

import os

from nodus.inventory.download import download_outputs
from nodus.store import SnapshotInfo, open_store


def test_a_download_syncs_its_files_then_its_folders_up_to_the_parent(tmp_path, monkeypatch):
    live = tmp_path / "live"
    (live / "out" / "deep").mkdir(parents=True)
    (live / "out" / "a.txt").write_text("a")
    (live / "out" / "deep" / "b.bin").write_bytes(os.urandom(3000))
    store = open_store("file://" + str(tmp_path / "store"))
    info = SnapshotInfo(run="run_a", stage="main", attempt=1, step=1)
    manifest = store.capture(str(live), ["out"], info=info)

    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1]
    )
    target = tmp_path / "new" / "download"
    files = download_outputs(store, [manifest], str(target))

    assert sorted(files) == ["out/a.txt", "out/deep/b.bin"]
    written = [str(target / name) for name in files]
    folders = [
        str(target / "out" / "deep"),
        str(target / "out"),
        str(target),
        str(tmp_path / "new"),
    ]
    for path in written + folders:
        assert path in synced, f"{path} was never fsynced"
    for folder in folders:  # each after every file under it
        inside = [synced.index(path) for path in written if path.startswith(folder + "/")]
        assert len(synced) - synced[::-1].index(folder) - 1 > max(inside), folder
