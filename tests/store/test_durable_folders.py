"""Every folder nodus makes (the store's, the catalog's home) is durable in its parent before
anything inside it is created or published.

LazyFS cannot show this (its directory operations go straight to the backing file system:
tests/power), so the order is observed here on real writes: ``os.mkdir``, ``os.fsync`` and every
call that creates or publishes a name (``os.open`` with ``O_CREAT``, ``os.replace``,
``os.rename``, ``os.link``) are recorded while a store captures, records a run, pins, deletes
and sweeps, and while a catalog is made in a home whose parents do not exist yet.
"""

from __future__ import annotations

import os

import pytest

from nodus.store import SnapshotInfo, keys, open_store

from .trees import write_tree


@pytest.fixture
def calls(monkeypatch):
    """``[(operation, absolute path)]``: mkdir, fsync (of the path a descriptor names), create
    and publish, in the order this process made them."""
    seen: list[tuple[str, str]] = []
    real_mkdir, real_fsync, real_open = os.mkdir, os.fsync, os.open
    real_replace, real_rename, real_link = os.replace, os.rename, os.link

    def mkdir(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        seen.append(("mkdir", os.path.abspath(os.fsdecode(path))))

    def fsync(fd):
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and isinstance(path, str | bytes):
            seen.append(("create", os.path.abspath(os.fsdecode(path))))
        return real_open(path, flags, *args, **kwargs)

    def publisher(real):
        def publish(source, target, *args, **kwargs):
            seen.append(("publish", os.path.abspath(os.fsdecode(target))))
            return real(source, target, *args, **kwargs)

        return publish

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "replace", publisher(real_replace))
    monkeypatch.setattr(os, "rename", publisher(real_rename))
    monkeypatch.setattr(os, "link", publisher(real_link))
    return seen


def _assert_each_new_folder_synced_first(calls: list[tuple[str, str]], under: str) -> list[str]:
    """Each folder made under ``under``: its parent fsynced after the mkdir and before anything
    is created or published inside it (at any depth). Returns the folders checked."""
    made = [(i, path) for i, (op, path) in enumerate(calls) if op == "mkdir"]
    checked = []
    for index, folder in made:
        if not folder.startswith(under):
            continue
        parent = os.path.dirname(folder)
        synced = next(
            (i for i, (op, p) in enumerate(calls) if i > index and op == "fsync" and p == parent),
            None,
        )
        inside = next(
            (
                i
                for i, (op, p) in enumerate(calls)
                if i > index and op in ("create", "publish", "mkdir") and p.startswith(folder + "/")
            ),
            None,
        )
        assert synced is not None, f"{folder} was made and its parent never fsynced"
        assert inside is None or synced < inside, (
            f"{calls[inside]} inside {folder} before its parent {parent} was fsynced"
        )
        checked.append(folder)
    return checked


def test_every_folder_a_store_makes_is_synced_into_its_parent_before_use(calls, tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"state/a.bin": os.urandom(5000), "state/sub/b.bin": os.urandom(70000)})
    root = tmp_path / "new" / "parents" / "store"  # the root's parents are made by the store
    store = open_store("file://" + str(root))
    info = SnapshotInfo(run="run_a", stage="train", attempt=1, step=1)
    manifest = store.capture(str(live), ["state"], info=info)
    store.storage.write(keys.run_record_key("run_a"), b"{}")
    store.storage.write(keys.hold_key(manifest.id, "pin"), b"{}")
    store.delete(manifest.id, reason="test")
    store.gc_blobs(0)

    checked = _assert_each_new_folder_synced_first(calls, str(tmp_path / "new"))
    relative = {os.path.relpath(folder, root) for folder in checked}
    # The root's parents, and the folders each kind of record lives in, were all checked.
    assert {"..", "../..", "."} <= relative
    for top in (keys.BLOBS, keys.SNAPSHOTS, "runs", "holds", "tmp"):
        assert any(r == top or r.startswith(top + "/") for r in relative), (top, relative)
    assert any(r.startswith(keys.BLOBS + "/") for r in relative)  # blobs/<xx>/


def test_a_home_made_first_by_another_command_is_durable_too(calls, tmp_path):
    """``nodus run`` may make the home for its resolution cache or a lock before the catalog
    opens: whoever makes a folder syncs it."""
    from nodus._atomic import private_folder
    from nodus.runner.catalog.core import Catalog

    home = tmp_path / "x" / "home"
    private_folder(str(home / "cache" / "resolved"))
    Catalog(str(home)).close()
    checked = _assert_each_new_folder_synced_first(calls, str(tmp_path / "x"))
    assert {str(home), str(home / "cache"), str(home / "cache" / "resolved")} <= set(checked)


def test_the_catalogs_home_and_its_file_are_durable_before_the_first_run(calls, tmp_path):
    from nodus.runner.catalog.core import Catalog

    home = tmp_path / "a" / "b" / "home"
    Catalog(str(home)).create_run(
        name="w", workload={}, store="", key=None, lock_name="l", stage_names=["main"]
    )
    checked = _assert_each_new_folder_synced_first(calls, str(tmp_path / "a"))
    assert str(home) in checked
    created = calls.index(("create", str(home / "nodus.db")))
    assert ("fsync", str(home)) in calls[created:], "the catalog file's name was never synced"
