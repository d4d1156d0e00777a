"""Crash-safe deletion and gc: tombstone states, kills at every step, races with captures.

The kill tests run a real child process (deletion_child.py) that the store ends at one crash
point (``NODUS_STORE_CRASH_AT``); the store it leaves must be consistent, and gc must complete
it. Snapshots share blobs on purpose (identical files in several snapshots and kinds), so a
deletion that freed a blob someone else still holds shows up as a restore that fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodus.errors import NotFoundError, UsageError
from nodus.store import SnapshotInfo, deleting, keys, open_store
from nodus.store.sweep import Sweep

from .trees import read_tree, write_tree

CHILD = Path(__file__).with_name("deletion_child.py")
STORE_SOURCE = Path(__file__).resolve().parents[2] / "src" / "nodus" / "store"


def content(label: str) -> bytes:
    """Deterministic bytes for ``label``; equal labels give equal files (one shared blob)."""
    seed = hashlib.sha256(label.encode()).digest()
    return seed * (64 + seed[0])


# Each checkpoint's files by name -> content label. A and B share the weights file and an RNG
# state (a blob of the `state` kind held by two snapshots); every checkpoint and the source
# share config.json. D's and E's `state` deletions are left pending (deferred by a capture).
CHECKPOINTS = {
    "A": {"optimizer.pt": "opt-A", "trainer_state.json": "ts-A", "rng_state.pth": "rng-AB",
          "model.safetensors": "model-AB", "config.json": "config", "notes.txt": "notes-A"},
    "B": {"optimizer.pt": "opt-B", "trainer_state.json": "ts-B", "rng_state.pth": "rng-AB",
          "model.safetensors": "model-AB", "config.json": "config", "notes.txt": "notes-B"},
    "C": {"optimizer.pt": "opt-C", "model.safetensors": "model-C", "config.json": "config",
          "notes.txt": "notes-C"},
    "D": {"optimizer.pt": "opt-D", "trainer_state.json": "ts-D", "model.safetensors": "model-D",
          "config.json": "config"},
    "E": {"optimizer.pt": "opt-E", "trainer_state.json": "ts-E"},
}  # fmt: skip
SOURCE = {"train.py": "src-train", "config.json": "config"}
# The run's outputs name blobs of A's state (deleted by delete_kind) and of B (deleted whole):
# a deletion of any kind never frees a blob another record names.
OUTPUTS = {"optimizer.pt": "opt-A", "model.safetensors": "model-AB", "notes.txt": "notes-B",
           "trainer_state.json": "ts-B"}  # fmt: skip
DEAD = "ckpt_" + "d" * 16  # a snapshot that is gone, leaving a tombstone and a hold record

# The crash points each operation passes, in order; every one must be reached.
POINTS = {
    "delete_kind": [
        "delete_kind.marked",
        "sweep.blob-deleted",
        "delete_kind.freed",
        "delete_kind.finished",
        "delete_kind.manifest-removed",
        "delete_kind.tombstones-removed",
    ],
    "delete": [
        "delete.marked",
        "sweep.blob-deleted",
        "delete.freed",  # a snapshot that goes takes its marks along: none is finished
        "delete.manifest-removed",
        "delete.tombstones-removed",
    ],
    "finish": [
        "sweep.blob-deleted",
        "finish.freed",
        "finish.finished",
        "finish.manifest-removed",
        "finish.tombstones-removed",
        "finish.orphan-removed",
    ],
}
TARGET = {"delete_kind": "A", "delete": "B", "finish": None}


@dataclass
class Template:
    root: Path
    ids: dict[str, str]  # name -> snapshot id
    expected: dict[str, dict[str, tuple[str, bytes]]]  # id -> path -> (kind, contents)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Template:
    """A store with five checkpoints, outputs, a source, two pending deletions and orphan
    records."""
    base = tmp_path_factory.mktemp("template")
    store = open_store(str(base / "store"))
    ids, expected = {}, {}
    for step, (name, files) in enumerate(CHECKPOINTS.items(), start=1):
        folder = f"state/checkpoint-{step}"
        made = _capture(store, base / name, {f"{folder}/{n}": c for n, c in files.items()}, step)
        ids[name], expected[made.id] = made.id, _contents(made, files, folder)
    # D's and E's state deletions begin while the source is being captured: their sweep is
    # deferred, so they stay marked "deleting", as after a gc that met a running capture.
    deferred = []

    def begin_deletions() -> None:
        deferred.extend(store.delete_kind(ids[n], "state") for n in ("D", "E"))

    outputs = _capture(store, base / "out", {f"out/{n}": c for n, c in OUTPUTS.items()}, None,
                       role="outputs")  # fmt: skip
    ids["O"], expected[outputs.id] = outputs.id, _contents(outputs, OUTPUTS, "out")
    source = _capture(store, base / "src", SOURCE, None, role="source", guard=begin_deletions)
    assert all(report.deferred for report in deferred)
    ids["S"], expected[source.id] = source.id, _contents(source, SOURCE, "")
    store.hold_records.write(ids["A"], "pin", {"by": "test"})
    store.hold_records.write(ids["E"], "pin", {"by": "test"})
    store.hold_records.write(DEAD, "pin", {"by": "test"})
    store.storage.write(keys.tombstone_key(DEAD, "state"), b'{"state": "deleted"}')
    return Template(base / "store", ids, expected)


def _capture(store, live, files, step, role="checkpoint", guard=None):
    write_tree(live, {path: content(label) for path, label in files.items()})
    info = SnapshotInfo(run="r", stage="main", attempt=1, step=step, role=role)
    return store.capture(str(live), ["."], info=info, guard=guard)


def _contents(manifest, files, folder) -> dict[str, tuple[str, bytes]]:
    kinds = {entry.path: entry.kind for entry in manifest.files}
    prefix = f"{folder}/" if folder else ""
    return {prefix + n: (kinds[prefix + n], content(label)) for n, label in files.items()}


# --- a kill at each step -------------------------------------------------------------------------


CASES = [(op, point) for op, points in POINTS.items() for point in points]


@pytest.mark.slow  # real SIGKILLs and racing processes
@pytest.mark.parametrize(("op", "point"), CASES, ids=[f"{op}:{point}" for op, point in CASES])
def test_a_kill_at_each_step_of_a_deletion_leaves_a_consistent_store_that_gc_completes(
    template, tmp_path, op, point
):
    root = tmp_path / "store"
    shutil.copytree(template.root, root)
    url = str(root)
    target = [template.ids[TARGET[op]]] if TARGET[op] else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "NODUS_STORE_CRASH_AT": point}
    child = subprocess.run(
        [sys.executable, str(CHILD), url, op, *target], env=env, capture_output=True, timeout=60
    )
    assert child.returncode == 137, child.stderr.decode()  # it died at that very step

    store = open_store(url)  # what the next process sees
    _assert_consistent(store, template, tmp_path / "after-kill")

    finished, swept = store.finish_deletions(), store.gc_blobs(grace_s=0)
    assert not finished.deferred and not swept.deferred  # the killed gc is not waited out
    _assert_complete(store)
    _assert_consistent(store, template, tmp_path / "after-gc")

    _redo(store, op, target)  # what the caller does next time round (rotation, expiry)
    _assert_complete(store)
    _assert_consistent(store, template, tmp_path / "after-redo")
    left = {m.id: m.kinds for m in store.list(role=None)}
    ids = template.ids
    wanted = {
        ids["A"]: ("weights", "state", "files"),
        ids["B"]: ("weights", "state", "files"),
        ids["C"]: ("weights", "state", "files"),
        ids["D"]: ("weights",),  # its pending state deletion finished; E had nothing else
        ids["S"]: ("weights", "files"),
        ids["O"]: ("weights", "state", "files"),
    }
    for deleted in target:
        del wanted[deleted]
    assert left == wanted
    assert set(store.hold_records.names()) == {ids["A"]} - set(target)


def test_the_kill_test_covers_every_crash_point_in_the_store():
    # Points are named in full (crash_point("delete.marked")) or by a step that each operation
    # passes under its own name (crash_point(f"{step}.freed")).
    call = re.compile(r'crash_point\((?:"([^"]+)"|f"\{step\}\.([^"]+)")')
    found = [call.findall(path.read_text()) for path in STORE_SOURCE.glob("*.py")]
    named = {name for calls in found for name, _step in calls if name}
    steps = {step for calls in found for _name, step in calls if step}
    killed = {point for _op, point in CASES}
    assert named <= killed
    assert {point.partition(".")[2] for point in killed - named} == steps


def _redo(store, op: str, target: list[str]) -> None:
    try:
        if op == "delete_kind":
            for kind in ("state", "weights", "files"):
                store.delete_kind(target[0], kind)
        elif op == "delete":
            store.delete(target[0])
    except NotFoundError:
        pass  # gc had already completed it


def _assert_consistent(store, template: Template, scratch: Path) -> None:
    """Sound; every snapshot restores what it still holds, byte for byte; deletions begun are
    invisible in listings, totals and restores."""
    report = store.verify()
    assert report.sound and not report.damaged and not report.corrupt_blobs, report.lines()
    listed = {manifest.id: manifest for manifest in store.list(role=None)}
    for snapshot_id, files in template.expected.items():
        begun = set(store.deletions(snapshot_id))
        try:
            manifest = store.get(snapshot_id)
        except NotFoundError:
            assert snapshot_id not in listed
            continue
        assert listed[snapshot_id].kinds == manifest.kinds
        assert not begun & set(manifest.kinds) and set(manifest.bytes_by_kind) == set(
            manifest.kinds
        )
        held = {path: data for path, (kind, data) in files.items() if kind in manifest.kinds}
        assert manifest.total_bytes == sum(len(data) for data in held.values())
        store.restore(snapshot_id, str(scratch / snapshot_id))  # verifies every hash
        assert read_tree(scratch / snapshot_id) == held
        for kind in begun & set(manifest.stored_kinds):
            with pytest.raises(NotFoundError, match="no longer holds"):
                store.restore(snapshot_id, str(scratch / "gone"), kinds=[kind])


def _assert_complete(store) -> None:
    """Nothing half done: no pending mark, no unreferenced blob, no orphan record or flag."""
    assert store.pending_deletions() == []
    report = store.verify()
    assert report.sound and report.garbage == [] and report.pending_deletions == []
    held = {e.hash for m in store.list(role=None) for e in m.held_files() if not e.is_link}
    on_disk = {keys.hash_of_blob_key(info.key) for info in store.storage.list(keys.BLOBS)}
    assert on_disk == held
    manifests = {keys.snapshot_id_of_key(i.key) for i in store.storage.list(keys.SNAPSHOTS)}
    assert manifests == {m.id for m in store.list(role=None)}  # none left with no kind
    for folder in (keys.LOCKS, keys.INTENTS, keys.TMP):
        assert store.storage.list(folder) == []


# --- the deletion protocol, on every kind of store -----------------------------------------------


def _two_checkpoints(store, live):
    """Two checkpoints sharing their weights; returns them."""
    write_tree(live, {"state/model.safetensors": content("w"), "state/optimizer.pt": content("1")})
    older = store.capture(str(live), ["state"], info=SnapshotInfo("r", "main", 1, 1))
    write_tree(live, {"state/optimizer.pt": content("2")})
    newer = store.capture(str(live), ["state"], info=SnapshotInfo("r", "main", 1, 2))
    return older, newer


def test_a_deletion_is_marked_then_finished_with_its_reason_and_freed_bytes(store, live):
    older, newer = _two_checkpoints(store, live)
    report = store.delete_kind(older.id, "state")
    assert (report.finished_deletions, report.deleted_blobs) == (1, 1)
    record = open_store(store.url).deletions(older.id)["state"]
    assert (record["state"], record["reason"]) == ("deleted", "retention")
    assert record["freed_bytes"] == len(content("1")) == report.freed_bytes
    assert store.pending_deletions() == []
    assert store.delete_kind(older.id, "state").finished_deletions == 0  # already done
    assert store.delete_kind(older.id, "files") == type(report)()  # a kind it never held
    assert store.deletions(older.id).keys() == {"state"}

    report = store.delete_kind(older.id, "weights", reason="test")  # its last kind
    assert report.removed_snapshots == 1 and report.deleted_blobs == 0  # newer holds them
    with pytest.raises(NotFoundError):
        store.get(older.id)
    assert [m.id for m in open_store(store.url).list()] == [newer.id]
    assert store.deletions(older.id) == {} and not store.storage.list(keys.TOMBSTONES)


def test_a_deletion_deferred_by_a_capture_is_invisible_at_once_and_gc_finishes_it(
    store, live, tmp_path
):
    older, newer = _two_checkpoints(store, live)
    reports = []
    write_tree(tmp_path / "other", {"state/notes.txt": b"captured meanwhile"})
    store.capture(
        str(tmp_path / "other"),
        ["state"],
        info=SnapshotInfo("r", "other", 1, 1),
        guard=lambda: reports.append(open_store(store.url).delete_kind(older.id, "state")),
    )
    assert reports[0].deferred and reports[0].pending_deletions == 1
    assert store.pending_deletions() == [(older.id, "state")]
    assert store.deletions(older.id)["state"]["state"] == "deleting"
    seen = open_store(store.url).get(older.id)
    assert seen.kinds == ("weights",) and seen.total_bytes == len(content("w"))

    report = store.finish_deletions()
    assert (report.finished_deletions, report.deleted_blobs, report.deferred) == (1, 1, False)
    assert store.pending_deletions() == [] and store.deletions(older.id)["state"]["freed_bytes"]
    assert store.check(newer.id) == [] and store.check(older.id) == []


def test_sources_and_outputs_are_deleted_only_whole(store, live):
    write_tree(live, {"train.py": b"print()", "config.json": b"{}"})
    source = store.capture(str(live), ["."], info=SnapshotInfo("r", None, 1, None, role="source"))
    with pytest.raises(UsageError, match="whole run"):
        store.delete_kind(source.id, "files")
    with pytest.raises(UsageError, match="artifact kind"):
        store.delete_kind(source.id, "everything")
    report = store.delete(source.id)
    assert (report.removed_snapshots, report.deleted_blobs) == (1, 2)
    assert store.list(role=None) == [] and store.storage.list(keys.BLOBS) == []
    with pytest.raises(NotFoundError):
        store.delete(source.id)


def test_gc_removes_records_of_gone_snapshots_which_verify_calls_garbage_not_damage(store, live):
    older, _newer = _two_checkpoints(store, live)
    store.hold_records.write(DEAD, "pin", {})
    store.storage.write(keys.tombstone_key(DEAD, "weights"), b"{}")  # as older nodus wrote it
    store.hold_records.write(older.id, "pin", {})

    report = open_store(store.url).verify()
    assert report.sound and report.garbage == [
        keys.hold_key(DEAD, "pin"),
        keys.tombstone_key(DEAD, "weights"),
    ]
    assert store.finish_deletions().removed_records == 2
    assert store.hold_records.names() == {older.id: {"pin"}}
    assert store.verify().garbage == []

    store.storage.write(keys.tombstone_key(DEAD, "state"), b"{}")
    repaired = store.verify(repair=True)
    assert repaired.sound and "removed 1 tombstones" in " ".join(repaired.repaired)
    assert store.storage.list(keys.TOMBSTONES) == []


def test_dry_run_lists_exactly_what_the_sweep_then_deletes(store, live):
    older, _newer = _two_checkpoints(store, live)
    store.storage.write(keys.blob_key("0" * 32), b"left by a killed capture")
    store.storage.write(keys.tombstone_key(older.id, "state"), b"{}")  # begun, not finished
    listed = open_store(store.url).unreferenced_blobs(grace_s=0)
    assert store.unreferenced_blobs() == []  # younger than the grace period
    assert sorted(key for key, _size in listed) == sorted(
        [keys.blob_key("0" * 32), keys.blob_key(older.files[-1].hash)]
    )
    report = store.finish_deletions().add(store.gc_blobs(grace_s=0))  # as `nodus gc` reports
    assert sorted(report.deleted) == sorted(key for key, _ in listed)
    assert (report.finished_deletions, report.deleted_blobs, report.deferred) == (1, 2, False)
    assert report.freed_bytes == sum(size for _key, size in listed)


# --- concurrent sweeps and captures ---------------------------------------------------------------


def test_a_second_gc_defers_to_a_running_one_and_never_ends_its_lock(store, live, monkeypatch):
    monkeypatch.setattr(deleting, "SWEEP_RETRY_S", 0.0)
    older, _newer = _two_checkpoints(store, live)
    store.storage.write(keys.tombstone_key(older.id, "state"), b"{}")
    with Sweep(store.storage) as running:
        assert running.allowed
        second = open_store(store.url)
        report = second.finish_deletions()
        assert report.deferred and f"another gc is sweeping (pid {os.getpid()})" in report.reason
        assert report.pending_deletions == 1 and second.gc_blobs(grace_s=0).deferred
        # Both deferred sweeps have released their own locks; the running one still holds its.
        assert len(store.storage.list(keys.LOCKS)) == 1
    assert store.finish_deletions().finished_deletions == 1
    assert store.storage.list(keys.LOCKS) == []


def test_a_sweep_lock_from_another_machine_counts_until_its_lease_ends(store, monkeypatch):
    monkeypatch.setattr(deleting, "SWEEP_RETRY_S", 0.0)
    elsewhere = {"machine": "another-boot/1", "pid": 1, "started": 1}
    lock = keys.sweep_key(keys.new_sweep_token())
    store.storage.write(lock, json.dumps({"until": 4e9, "owner": elsewhere}).encode())
    report = store.gc_blobs(grace_s=0)
    assert report.deferred and "pid 1 on another machine" in report.reason
    store.storage.write(lock, json.dumps({"until": 1.0, "owner": elsewhere}).encode())
    report = store.gc_blobs(grace_s=0)
    assert not report.deferred and report.removed_leftovers == 1  # its lease ran out
    assert store.storage.list(keys.LOCKS) == []


@pytest.mark.slow  # real SIGKILLs and racing processes
def test_gc_racing_ten_captures_and_another_gc_loses_nothing_committed(tmp_path):
    """Ten threads capture distinct and shared contents (some equal to blobs of the snapshots
    being deleted) while two gc processes delete kinds of those other snapshots, finish
    deletions and sweep every unreferenced blob, without a grace period, in a loop."""
    url = str(tmp_path / "store")
    store = open_store(url)
    victims = [
        _capture(store, tmp_path / f"victim-{i}", {"state/optimizer.pt": f"shared-{i}",
                 "state/model.safetensors": f"weights-{i}", "state/notes.txt": f"notes-{i}"}, i)
        for i in range(10)
    ]  # fmt: skip
    stop = tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, str(CHILD), url, "gc-loop", str(stop), *(v.id for v in victims)]
    gcs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in "12"]
    assert [gc.stdout.readline() for gc in gcs] == ["ready\n", "ready\n"]
    committed: dict[str, dict[str, bytes]] = {}
    failures: list[BaseException] = []

    def capture_loop(thread: int) -> None:
        mine = open_store(url)  # one store object per capturing attempt, as the runner keeps
        rng = random.Random(thread)
        try:
            for step in range(8):
                live = tmp_path / f"live-{thread}-{step}"
                files = {
                    "state/optimizer.pt": f"shared-{(thread + step) % 10}",  # a victim's blob
                    "state/model.safetensors": f"weights-{rng.randrange(10)}",
                    "state/own.bin": f"own-{thread}-{step}",
                }
                made = _capture(mine, live, files, step)
                committed[made.id] = {p: content(label) for p, label in files.items()}
                time.sleep(rng.uniform(0.0, 0.1))  # leave the gcs a window
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=capture_loop, args=(t,)) for t in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.touch()
    outputs = [gc.communicate(timeout=60)[0] for gc in gcs]
    assert failures == [] and [gc.returncode for gc in gcs] == [0, 0], outputs
    assert all(line.startswith("swept") for line in outputs)

    store = open_store(url)
    store.finish_deletions()
    store.gc_blobs(grace_s=0)
    assert len(committed) == 80
    for snapshot_id, files in committed.items():
        store.restore(snapshot_id, str(tmp_path / "restored" / snapshot_id))
        assert read_tree(tmp_path / "restored" / snapshot_id) == files
    assert store.verify().sound
