"""Capture, unchanged re-capture and restore of a folder against `cp -r` on the same disk.

    .venv/bin/python benchmarks/capture.py [--gib 2] [--files 4] [--dir SCRATCH]

Builds a folder of FILES random files (GIB in all) under SCRATCH, then in one run times:
`cp -r` + `sync` of the folder vs capture into a file:// store (which fsyncs every blob and
the manifest), re-capture of the unchanged folder with the same store object, and restore
into an empty folder vs `cp -r` (neither syncs: a restore feeds a working copy that is rebuilt
after a crash). Throughput ratios are reported; targets: capture >= 0.9x cp, unchanged
re-capture <= 0.05x cp time, restore >= 0.9x cp.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from nodus.store import SnapshotInfo, open_store  # noqa: E402

BLOCK = 64 * 1024 * 1024


def make_folder(root: str, total: int, count: int) -> None:
    os.makedirs(root)
    for index in range(count):
        block = os.urandom(BLOCK)  # each file its own random contents
        remaining = total // count
        with open(os.path.join(root, f"shard-{index}.bin"), "wb") as handle:
            while remaining > 0:
                handle.write(block[: min(BLOCK, remaining)])
                remaining -= BLOCK
    subprocess.run(["sync"], check=True)


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run(scratch: str, total: int, count: int) -> dict:
    source = os.path.join(scratch, "live")
    make_folder(source, total, count)
    store = open_store("file://" + os.path.join(scratch, "store"))
    info = SnapshotInfo(run="bench", stage="main", attempt=1, step=1)
    time.sleep(1.5)  # leave the files out of the "just written" window, as a saved checkpoint is

    cp_sync = timed(lambda: subprocess.run(
        f"cp -r {source} {scratch}/cp1 && sync", shell=True, check=True))
    made = {}
    capture = timed(lambda: made.update(m=store.capture(source, ["."], info=info)))
    recapture = timed(lambda: store.capture(source, ["."], info=info))
    cp_plain = timed(lambda: subprocess.run(["cp", "-r", source, f"{scratch}/cp2"], check=True))
    restore = timed(lambda: store.restore(made["m"].id, os.path.join(scratch, "restored")))
    gib = total / 2**30
    return {
        "gib": round(gib, 3),
        "files": count,
        "cp_r_sync_s": round(cp_sync, 3),
        "capture_s": round(capture, 3),
        "capture_vs_cp_throughput": round(cp_sync / capture, 3),
        "unchanged_recapture_s": round(recapture, 4),
        "recapture_vs_cp_time": round(recapture / cp_sync, 4),
        "cp_r_s": round(cp_plain, 3),
        "restore_s": round(restore, 3),
        "restore_vs_cp_throughput": round(cp_plain / restore, 3),
        "capture_gib_s": round(gib / capture, 3),
        "restore_gib_s": round(gib / restore, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="nodus-bench-", dir=args.dir)
    try:
        # Warm-up: this machine's first touch of memory and of the code paths is slow.
        run(os.path.join(base, "warmup"), 256 * 2**20, args.files)
        shutil.rmtree(os.path.join(base, "warmup"))
        print(json.dumps(run(os.path.join(base, "measured"), int(args.gib * 2**30), args.files),
                         indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
