"""The same store behaviour on every backend: file://, memory:// and S3 (moto on loopback)."""

from __future__ import annotations

import json
import os

import pytest

from nodus.errors import (
    NotFoundError,
    SnapshotDamagedError,
    StaleAttemptError,
    UsageError,
)
from nodus.store import SnapshotInfo, deleting, keys, open_store

from .trees import read_tree, write_tree

CHECKPOINT = {
    "state/checkpoint-10/model.safetensors": os.urandom(20_000),
    "state/checkpoint-10/config.json": '{"layers": 2}',
    "state/checkpoint-10/optimizer.pt": os.urandom(9_000),
    "state/checkpoint-10/rng_state.pth": os.urandom(300),
    "state/checkpoint-10/notes.txt": "saved by the program",
}


def info(step, run="run_a", stage="train", attempt=1, **extra) -> SnapshotInfo:
    return SnapshotInfo(run=run, stage=stage, attempt=attempt, step=step, **extra)


def test_capture_restores_exactly_what_was_captured(store, live, tmp_path):
    write_tree(live, CHECKPOINT)
    os.chmod(live / "state/checkpoint-10/notes.txt", 0o600)
    os.symlink("checkpoint-10", live / "state/latest")
    metrics = {"loss": 2.5, "learning_rate": 4e-5}
    made = store.capture(str(live), ["state"], info=info(10, epoch=0.5, metrics=metrics))

    assert made.id.startswith("ckpt_")
    (got,) = store.list()
    assert (got.id, got.run, got.stage, got.step, got.epoch, got.metrics) == (
        made.id,
        "run_a",
        "train",
        10,
        0.5,
        metrics,
    )
    assert got.bytes_by_kind == {"weights": 20_000 + 13, "state": 9_300, "files": 20}
    assert got.kinds == ("weights", "state", "files")

    target = tmp_path / "restored"
    store.restore(made.id, str(target))
    expected = {
        **{k: v.encode() if isinstance(v, str) else v for k, v in CHECKPOINT.items()},
        "state/latest": "-> checkpoint-10",
    }
    assert read_tree(target) == expected
    assert os.stat(target / "state/checkpoint-10/notes.txt").st_mode & 0o777 == 0o600
    assert store.check(made.id) == []


def test_restore_gives_each_file_its_captured_modification_time(store, live, tmp_path):
    write_tree(live, CHECKPOINT)
    for number, name in enumerate(sorted(CHECKPOINT)):  # distinct times, long settled
        stamp = 1_600_000_000_123_456_789 + number * 1_000_000_007
        os.utime(live / name, ns=(stamp, stamp))
    first = store.capture(str(live), ["state"], info=info(10))
    again = store.capture(str(live), ["state"], info=info(11))  # hashes known: nothing re-read

    for made in (first, again):
        target = tmp_path / made.id
        open_store(store.url).restore(made.id, str(target))
        for name in CHECKPOINT:
            assert os.stat(target / name).st_mtime_ns == os.stat(live / name).st_mtime_ns, name


def test_a_manifest_without_modification_times_still_restores(store, live, tmp_path):
    write_tree(live, {"state/a.bin": b"older nodus"})
    made = store.capture(str(live), ["state"], info=info(1))
    raw = json.loads(store.storage.read(keys.manifest_key(made.id)))
    for entry in raw["files"]:
        del entry["mtime_ns"]  # as a manifest written before mtimes were recorded
    store.storage.write(keys.manifest_key(made.id), json.dumps(raw).encode())

    open_store(store.url).restore(made.id, str(tmp_path / "target"))
    assert read_tree(tmp_path / "target") == {"state/a.bin": b"older nodus"}


def test_list_is_committed_only_oldest_first_and_filtered(store, live):
    write_tree(live, {"state/a.bin": b"a"})
    late = store.capture(str(live), ["state"], info=info(20))
    early = store.capture(str(live), ["state"], info=info(5))
    other = store.capture(str(live), ["state"], info=info(7, run="run_b"))
    source = store.capture(str(live), ["."], info=info(None, role="source"))

    def stale():
        raise StaleAttemptError("attempt 1 was superseded")

    with pytest.raises(StaleAttemptError):
        store.capture(str(live), ["state"], info=info(30), guard=stale)

    reopened = open_store(store.url)  # another process's view: nothing cached
    assert [m.id for m in reopened.list()] == [early.id, other.id, late.id]
    assert [m.id for m in reopened.list(run="run_a")] == [early.id, late.id]
    assert [m.id for m in reopened.list(role="source")] == [source.id]
    assert source.id.startswith("src_")
    with pytest.raises(NotFoundError):
        reopened.get("ckpt_00000000deadbeef")


def test_selection_is_literal_and_dot_leaves_out_private_folder(store, live, tmp_path):
    write_tree(
        live,
        {
            "state/s.bin": "s",
            "out/model/w.bin": "w",
            ".nodus/control.json": "{}",
            ".git/HEAD": "ref",
            "train.py": "print()",
            "debug.log": "noise",
        },
    )
    picked = store.capture(str(live), ["state", "missing", "out/model"], info=info(1))
    assert sorted(f.path for f in picked.files) == ["out/model/w.bin", "state/s.bin"]

    whole = store.capture(str(live), ["."], info=info(2), excludes=(".git", "*.log"))
    assert sorted(f.path for f in whole.files) == ["out/model/w.bin", "state/s.bin", "train.py"]


def test_identical_contents_are_stored_once(store, live):
    payload = os.urandom(50_000)
    write_tree(live, {"state/a.bin": payload, "state/b.bin": payload})
    store.capture(str(live), ["state"], info=info(1))
    open_store(store.url).capture(str(live), ["state"], info=info(2))
    blobs = store.storage.list(keys.BLOBS)
    assert len(blobs) == 1 and blobs[0].size == 50_000


def test_existing_blob_is_never_rewritten_and_verify_repair_heals(store, live, tmp_path):
    write_tree(live, {"state/a.bin": b"precious"})
    first = store.capture(str(live), ["state"], info=info(1))
    digest = first.files[0].hash
    store.storage.write(keys.blob_key(digest), b"garbage!")  # bit rot under the right name

    second = open_store(store.url).capture(str(live), ["state"], info=info(2))
    assert store.storage.read(keys.blob_key(digest)) == b"garbage!"  # never rewritten
    (problem,) = store.check(second.id)
    assert problem.startswith(f"state/a.bin: blob {digest} is altered")

    report = store.verify()
    assert not report.sound and set(report.damaged) == {first.id, second.id}
    assert report.corrupt_blobs == [digest]
    repaired = store.verify(repair=True)
    assert repaired.sound and store.list() == []

    third = open_store(store.url).capture(str(live), ["state"], info=info(3))
    store.restore(third.id, str(tmp_path / "r"))
    assert (tmp_path / "r/state/a.bin").read_bytes() == b"precious"
    assert store.verify().sound


def test_damaged_snapshot_is_refused_and_target_left_empty(store, live, tmp_path):
    write_tree(live, CHECKPOINT)
    made = store.capture(str(live), ["state"], info=info(10))
    weights = next(f for f in made.files if f.path.endswith("model.safetensors"))
    data = bytearray(store.storage.read(keys.blob_key(weights.hash)))
    data[1234] ^= 0x01
    store.storage.write(keys.blob_key(weights.hash), bytes(data))

    target = tmp_path / "restored"
    with pytest.raises(SnapshotDamagedError, match=r"model\.safetensors"):
        store.restore(made.id, str(target))
    assert os.listdir(target) == [] or read_tree(target) == {}
    assert any("model.safetensors" in p for p in store.check(made.id))


def test_missing_blob_is_reported_as_damaged(store, live, tmp_path):
    write_tree(live, {"state/optimizer.pt": os.urandom(1000)})
    made = store.capture(str(live), ["state"], info=info(1))
    store.storage.delete(keys.blob_key(made.files[0].hash))
    assert store.check(made.id) == [f"state/optimizer.pt: blob {made.files[0].hash} is missing"]
    with pytest.raises(SnapshotDamagedError, match="missing"):
        store.restore(made.id, str(tmp_path / "r"))


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "../escape.txt"},
        {"path": "/etc/evil"},
        {"path": "state/../../escape.txt"},
        {"path": "state/link", "target": "../../outside", "hash": "", "size": 0},
        {"path": "state/link", "target": "/etc", "hash": "", "size": 0},
    ],
    ids=["dotdot", "absolute", "inner-dotdot", "escaping-link", "absolute-link"],
)
def test_tampered_manifest_paths_are_refused(store, live, tmp_path, entry):
    write_tree(live, {"state/a.bin": b"data"})
    made = store.capture(str(live), ["state"], info=info(1))
    raw = json.loads(store.storage.read(keys.manifest_key(made.id)))
    raw["files"].append({**raw["files"][0], **entry})
    store.storage.write(keys.manifest_key(made.id), json.dumps(raw).encode())

    fresh = open_store(store.url)
    # A manifest is checked when read: a path that could escape makes it damage, which every
    # restore passes over (UnsafePathError stays for what only the target shows).
    with pytest.raises(SnapshotDamagedError):
        fresh.restore(made.id, str(tmp_path / "target"))
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "outside").exists()
    assert fresh.check(made.id) != []


def test_delete_kind_keeps_other_kinds_and_shared_blobs(store, live, tmp_path):
    write_tree(live, CHECKPOINT)
    older = store.capture(str(live), ["state"], info=info(10))
    write_tree(live, {"state/checkpoint-10/optimizer.pt": os.urandom(9_000)})
    newer = store.capture(str(live), ["state"], info=info(11))

    store.delete_kind(older.id, "weights")  # the weights blobs are shared with `newer`
    store.delete_kind(older.id, "state")
    got = open_store(store.url).get(older.id)
    assert got.kinds == ("files",) and got.bytes_by_kind == {"files": 20}
    assert got.deleting == {"weights", "state"}

    with pytest.raises(NotFoundError, match="no longer holds"):
        store.restore(older.id, str(tmp_path / "a"), kinds=["state"])
    store.restore(older.id, str(tmp_path / "b"))
    assert set(read_tree(tmp_path / "b")) == {"state/checkpoint-10/notes.txt"}
    store.restore(newer.id, str(tmp_path / "c"))  # shared weights survived
    assert len(read_tree(tmp_path / "c")) == len(CHECKPOINT)
    old_optimizer = next(f.hash for f in older.files if f.path.endswith("optimizer.pt"))
    assert not store.storage.exists(keys.blob_key(old_optimizer))  # unshared state freed


def test_blob_gc_sweeps_only_old_unreferenced_blobs_and_is_idempotent(store, live):
    write_tree(live, {"state/keep.bin": b"kept", "state/tmp.bin": b"dropped"})
    kept = store.capture(str(live), ["state/keep.bin"], info=info(1))
    store.capture(str(live), ["state/tmp.bin"], info=info(2), guard=None)
    dropped = store.list()[-1]
    store.delete(dropped.id)  # frees its blob at once
    orphan = keys.blob_key("0" * 32)
    store.storage.write(orphan, b"left by a killed capture")

    assert store.gc_blobs().deleted_blobs == 0  # younger than the grace period
    report = store.gc_blobs(grace_s=0)
    assert report.deleted == [orphan] and not report.deferred
    assert store.gc_blobs(grace_s=0).deleted_blobs == 0
    assert store.check(kept.id) == [] and [m.id for m in store.list()] == [kept.id]


def test_blob_gc_during_a_capture_is_deferred_and_the_capture_commits(
    store, live, tmp_path, monkeypatch
):
    # The gc runs inside the capture's own guard: retrying the deferred sweep could only wait.
    monkeypatch.setattr(deleting, "SWEEP_RETRY_S", 0.0)
    write_tree(live, {"state/a.bin": os.urandom(5000)})
    reports = []
    made = store.capture(
        str(live),
        ["state"],
        info=info(1),
        guard=lambda: reports.append(open_store(store.url).gc_blobs(grace_s=0)),
    )
    assert reports[0].deferred and reports[0].deleted_blobs == 0
    store.restore(made.id, str(tmp_path / "r"))
    assert store.gc_blobs(grace_s=0).deleted_blobs == 0  # still referenced


def test_restore_needs_an_empty_target_unless_overlaid(store, live, tmp_path):
    write_tree(live, {"state/a.bin": b"snapshot"})
    made = store.capture(str(live), ["state"], info=info(1))
    copy = tmp_path / "copy"
    write_tree(copy, {"state/a.bin": b"source", "train.py": b"print()"})
    with pytest.raises(UsageError, match="not empty"):
        store.restore(made.id, str(copy))
    store.restore(made.id, str(copy), overlay=True)
    assert read_tree(copy) == {"state/a.bin": b"snapshot", "train.py": b"print()"}


def test_read_file_gives_one_file_verified(store, live):
    write_tree(live, CHECKPOINT)
    made = store.capture(str(live), ["state"], info=info(10))
    path = "state/checkpoint-10/config.json"
    assert open_store(store.url).read_file(made, path) == b'{"layers": 2}'
    with pytest.raises(NotFoundError, match="holds no file"):
        store.read_file(made, "state/checkpoint-10/absent.json")

    digest = next(f.hash for f in made.files if f.path == path)
    store.storage.write(keys.blob_key(digest), b'{"layers": 3}')  # same size, other bytes
    with pytest.raises(SnapshotDamagedError, match="do not match"):
        store.read_file(made, path)
    store.storage.delete(keys.blob_key(digest))
    with pytest.raises(SnapshotDamagedError, match="missing"):
        store.read_file(made, path)


def test_hold_records_live_next_to_the_snapshot_they_hold(store, live):
    write_tree(live, {"state/a.bin": b"a"})
    made = store.capture(str(live), ["state"], info=info(1))
    store.hold_records.write(made.id, "pin", {"kinds": ["files"], "by": "me@host"})
    store.hold_records.write(made.id, "epoch-released", {})

    other_view = open_store(store.url).hold_records
    assert other_view.names() == {made.id: {"pin", "epoch-released"}}
    assert other_view.read(made.id, "pin") == {"kinds": ["files"], "by": "me@host"}
    assert other_view.exists(made.id, "pin") and not other_view.exists(made.id, "other")

    store.storage.write(keys.hold_key(made.id, "epoch-released"), b"not json")
    assert other_view.read(made.id, "epoch-released") is None  # unreadable: no record
    other_view.delete(made.id, "pin")
    assert store.hold_records.names() == {made.id: {"epoch-released"}}
    assert store.hold_records.read(made.id, "pin") is None
