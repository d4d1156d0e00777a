"""A recovery's working copy: the last attempt's source files kept where their state shows them
untouched, everything else laid out again or moved aside (``Workspace.reuse_copy``)."""

from __future__ import annotations

import os
import stat

from nodus.runner.workspace.layout import Workspace
from nodus.store import SnapshotInfo, open_store

SOURCE = {"train.py": "print('hi')\n", "data/a.txt": "a\n", "data/b.txt": "b\n", "lib/c.py": "c\n"}


def _tree(root) -> dict[str, str]:
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path) as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def _lay(ws, store, manifests, set_aside: bool) -> None:
    """What an attempt's preparation does (``Attempt._lay_source``), the copy set aside first
    as on a recovery with a checkpoint to restore."""
    if set_aside:
        ws.set_aside_copy()
    if not ws.reuse_copy(store.storage, manifests):
        ws.reset_copy()
        store.restore(manifests[0].id, ws.copy)
    ws.note_copy(manifests)
    ws.discard_previous()


def test_tampered_folders_and_files_are_laid_out_again_and_untouched_files_kept(tmp_path):
    source = tmp_path / "source"
    for path, text in SOURCE.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_text(text)
    store = open_store("file://" + str(tmp_path / "store"))
    info = SnapshotInfo(run="r", stage=None, attempt=0, step=None, role="source")
    manifests = [store.capture(str(source), ["."], info=info)]
    ws = Workspace(str(tmp_path / "work"))
    _lay(ws, store, manifests, set_aside=False)
    copy = ws.copy
    inode = os.stat(os.path.join(copy, "train.py")).st_ino
    data_mode = stat.S_IMODE(os.stat(os.path.join(copy, "data")).st_mode)
    # What a killed program may leave: a folder swapped for a symlink out of the copy, a folder
    # made unwritable, a file added, a checkpoint written.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "c.py").write_text("not the source\n")
    os.rename(os.path.join(copy, "lib"), tmp_path / "old-lib")
    os.symlink(outside, os.path.join(copy, "lib"))
    with open(os.path.join(copy, "data", "added.txt"), "w") as handle:
        handle.write("added\n")
    os.chmod(os.path.join(copy, "data"), 0o500)
    os.makedirs(os.path.join(copy, "state"))
    with open(os.path.join(copy, "state", "ckpt"), "w") as handle:
        handle.write("checkpoint\n")

    _lay(ws, store, manifests, set_aside=True)

    assert _tree(copy) == SOURCE
    assert not os.path.islink(os.path.join(copy, "lib"))
    assert stat.S_IMODE(os.stat(os.path.join(copy, "data")).st_mode) == data_mode
    assert _tree(outside) == {"c.py": "not the source\n"}  # nothing written through the link
    assert os.stat(os.path.join(copy, "train.py")).st_ino == inode  # kept, not written
    assert not os.path.exists(ws.previous)

    # Untouched, every file stays the very one laid out.
    inodes = {p: os.stat(os.path.join(copy, p)).st_ino for p in SOURCE}
    _lay(ws, store, manifests, set_aside=False)
    assert {p: os.stat(os.path.join(copy, p)).st_ino for p in SOURCE} == inodes
    assert _tree(copy) == SOURCE
