"""`nodus gc` over a large store: finishing deletions and sweeping blobs, against `rm -r`.

    .venv/bin/python benchmarks/gc.py [--snapshots 1000] [--files 20] [--dir SCRATCH] [--quick]

Builds a file:// store of SNAPSHOTS checkpoints of FILES small files each (8 `state`, 8
`weights` and 4 `files`, 1-4 KiB, every file its own blob: 20,000 blobs by default), laid out
as captures leave it. Then, on that store:

- `list()` and `get()`: a fresh store object (every manifest read) and the same object again;
- rotation: `delete_kind` of one kind, as the runner does at a commit (mean of ROTATIONS calls);
- gc: the oldest 10 % of the snapshots are deleted whole (expiry), the `state` of the next
  60 % and the `weights` of the older half of those (rotation), all while a capture is
  announced, so every free is deferred and left marked, as after gc met running captures or
  was killed. A fresh store object (as `nodus gc` from cron) then runs `finish_deletions()` +
  `gc_blobs(0)`, timed against `rm -r` of a copy of exactly the blob files it deletes, laid out
  in the same fan-out folders. Neither syncs the deletions.

`--quick` builds 100 snapshots (2,000 blobs) to check the script itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from nodus.protocol import content_hasher
from nodus.store import FileEntry, Manifest, SnapshotInfo, classify, keys, open_store

NAMES = (  # 8 of the kind `state`, then 8 `weights`; any further ones are `files`
    ["optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json"]
    + [f"rng_state_{i}.pth" for i in range(4)]
    + [f"model-{i:05d}-of-00006.safetensors" for i in range(6)]
    + ["config.json", "tokenizer.json"]
)
ROTATIONS = 20


def build(root: str, snapshots: int, files: int) -> list[str]:
    """A store of ``snapshots`` checkpoints, written straight to disk (no fsync: setup only)."""
    store = open_store(root)
    names = NAMES + [f"notes-{i}.txt" for i in range(max(0, files - len(NAMES)))]
    ids = []
    for step in range(snapshots):
        entries = []
        for name in names[:files]:
            data = os.urandom(1024 + (hash((step, name)) % 3072))
            hasher = content_hasher()
            hasher.update(data)
            digest = hasher.hexdigest()
            _write(store.storage.path(keys.blob_key(digest)), data)
            path = f"state/checkpoint-{step}/{name}"
            entries.append(FileEntry(path, len(data), 0o644, digest, classify(path)))
        manifest = Manifest(
            id=keys.new_snapshot_id(),
            run="bench",
            stage="train",
            attempt=1,
            step=step,
            epoch=None,
            metrics={},
            role="checkpoint",
            created=time.time(),
            files=tuple(entries),
        )
        _write(store.storage.path(keys.manifest_key(manifest.id)), manifest.to_json())
        ids.append(manifest.id)
    return ids


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)


def time_reads(root: str, ids: list[str]) -> dict[str, float]:
    started = time.perf_counter()
    store = open_store(root)
    listed = store.list()
    cold = time.perf_counter() - started
    started = time.perf_counter()
    store.list()
    warm = time.perf_counter() - started
    started = time.perf_counter()
    for snapshot_id in ids[:100]:
        store.get(snapshot_id)
    get = (time.perf_counter() - started) / min(100, len(ids))
    assert len(listed) == len(ids)
    return {"list_cold_s": cold, "list_warm_s": warm, "get_s": get}


def time_rotation(root: str, ids: list[str]) -> float:
    """Mean time of one delete_kind on this store, from a store object that has listed it."""
    store = open_store(root)
    store.list()
    times = []
    for snapshot_id in ids[-ROTATIONS:]:  # the newest: not touched by the gc measure below
        started = time.perf_counter()
        report = store.delete_kind(snapshot_id, "state")
        times.append(time.perf_counter() - started)
        assert report.finished_deletions == 1 and not report.deferred
    return statistics.mean(times)


def mark_deletions(root: str, ids: list[str], scratch: str) -> int:
    """Begin the deletions while a capture is announced, so each one stays marked."""
    store = open_store(root)
    whole, rotated = len(ids) // 10, len(ids) * 6 // 10
    reports = []

    def begin() -> None:  # runs inside the capture, while its intent is live
        reports.extend(store.delete(i) for i in ids[:whole])
        reports.extend(store.delete_kind(i, "state") for i in ids[whole : whole + rotated])
        reports.extend(store.delete_kind(i, "weights") for i in ids[whole : whole + rotated // 2])

    live = os.path.join(scratch, "live")
    os.makedirs(live)
    info = SnapshotInfo(run="bench", stage="other", attempt=1, step=0)
    open_store(root).capture(live, ["."], info=info, guard=begin)
    assert all(report.deferred for report in reports)
    return len(store.pending_deletions())


def copy_doomed(root: str, scratch: str) -> tuple[str, int]:
    """A copy of exactly the blob files gc will delete, in the same fan-out folders."""
    store = open_store(root)
    copy = os.path.join(scratch, "rm-copy")
    doomed = store.unreferenced_blobs(grace_s=0)  # every marked kind is already unreferenced
    for key, _size in doomed:
        target = os.path.join(copy, key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(store.storage.path(key), target)
    return copy, len(doomed)


def time_gc(root: str, copy: str) -> dict[str, float | int]:
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    store = open_store(root)  # a fresh process's view, as `nodus gc` from cron has
    finished = store.finish_deletions()
    swept = store.gc_blobs(grace_s=0)
    gc_s = time.perf_counter() - started
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    subprocess.run(["rm", "-r", copy], check=True)
    rm_s = time.perf_counter() - started
    assert not (finished.deferred or swept.deferred) and store.pending_deletions() == []
    return {
        "gc_s": gc_s,
        "rm_s": rm_s,
        "blobs": finished.deleted_blobs + swept.deleted_blobs,
        "deletions": finished.finished_deletions,
        "snapshots": finished.removed_snapshots,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--files", type=int, default=20, help="files (blobs) per snapshot")
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--quick", action="store_true", help="100 snapshots: a check of the script")
    args = parser.parse_args()
    snapshots = 100 if args.quick else args.snapshots
    scratch = tempfile.mkdtemp(prefix="nodus-bench-gc-", dir=args.dir)
    try:
        root = os.path.join(scratch, "store")
        started = time.perf_counter()
        ids = build(root, snapshots, args.files)
        built_s = time.perf_counter() - started
        reads = time_reads(root, ids)
        rotation_s = time_rotation(root, ids)
        marks = mark_deletions(root, ids[:-ROTATIONS], scratch)
        copy, doomed = copy_doomed(root, scratch)
        gc = time_gc(root, copy)
        assert gc["blobs"] == doomed
        report(snapshots, snapshots * args.files, built_s, reads, rotation_s, marks, gc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(snapshots, blobs, built_s, reads, rotation_s, marks, gc) -> None:
    per_blob = lambda seconds: f"{seconds / gc['blobs'] * 1e6:.0f} µs"  # noqa: E731
    rows = [
        ("store", f"{snapshots} snapshots, {blobs} blobs (built in {built_s:.1f} s)", ""),
        ("list(), fresh store object", f"{reads['list_cold_s'] * 1e3:.0f} ms", ""),
        ("list(), same object again", f"{reads['list_warm_s'] * 1e3:.0f} ms", ""),
        ("get(id), same object", f"{reads['get_s'] * 1e3:.2f} ms", ""),
        ("delete_kind at a commit (rotation)", f"{rotation_s * 1e3:.1f} ms", ""),
        (
            "gc: finish_deletions + gc_blobs(0)",
            f"{gc['gc_s']:.2f} s",
            f"{gc['blobs']} blobs, {marks} marks, {gc['snapshots']} snapshots removed",
        ),
        ("gc per blob", per_blob(gc["gc_s"]), ""),
        ("rm -r of the same blob files", f"{gc['rm_s']:.2f} s", per_blob(gc["rm_s"]) + " a blob"),
        ("gc / rm -r", f"{gc['gc_s'] / gc['rm_s']:.1f}x", ""),
    ]
    width = max(len(row[0]) for row in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>12}  {note}")


if __name__ == "__main__":
    main()
