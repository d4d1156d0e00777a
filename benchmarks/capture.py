"""Capture, unchanged re-capture and restore of a folder against `cp -r` on the same disk.

    .venv/bin/python benchmarks/capture.py [--gib 2] [--files 4] [--dir SCRATCH]

Builds a folder of FILES random files (GIB in all) under SCRATCH, then in one run times:
`cp -r` + `sync` of the folder vs capture into a file:// store (which fsyncs every blob and
the manifest), re-capture of the unchanged folder with the same store object, and restore
into an empty folder vs `cp -r` (neither syncs: a restore feeds a working copy that is rebuilt
after a crash). Throughput ratios are reported; targets: capture >= 0.9x cp, unchanged
re-capture <= 0.05x cp time, restore >= 0.9x cp.

Like for like: capture and its `cp` read a folder that is in the page cache (a checkpoint the
program has just written); restore and its `cp` read files that are not (the store and the
folder are dropped from the page cache first, as after a crash or on a new machine).

Every measure starts after a `sync`. Rounds alternate which of the pair goes first, and the
medians are reported: on a VM whose host reclaims free memory, writing the same 2 GiB into the
page cache takes anywhere from 0.8 s to 7 s, so single rounds say little.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from nodus.store import SnapshotInfo, open_store

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


def read_all(root: str) -> None:
    for name in os.listdir(root):
        with open(os.path.join(root, name), "rb", buffering=0) as handle:
            while handle.read(BLOCK):
                pass


def drop_cached(*roots: str) -> None:
    """Drop the (clean, synced) page cache of every file under ``roots``; needs no privilege."""
    subprocess.run(["sync"], check=True)
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            for name in names:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def timed(action, cold: tuple[str, ...] = (), output: str | None = None) -> float:
    # Nothing written earlier may still be in flight: on this disk a measure that runs while
    # the page cache writes back the previous one's 2 GiB is slowed several times over.
    subprocess.run(["sync"], check=True)
    drop_cached(*cold)
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    if output is not None:  # the next measure starts with the same files and memory in use
        shutil.rmtree(output)
        subprocess.run(["sync"], check=True)
    return elapsed


def one_round(source: str, scratch: str, cp_first: bool) -> dict:
    """Each measure once, on fresh targets (a fresh store: existing blobs are never rewritten)."""
    os.makedirs(scratch)
    read_all(source)  # the previous round's restore measures dropped it from the page cache
    store = open_store("file://" + os.path.join(scratch, "store"))
    info = SnapshotInfo(run="bench", stage="main", attempt=1, step=1)
    made = {}

    def cp_sync():
        command = f"cp -r {source} {scratch}/cp1 && sync"
        return timed(
            lambda: subprocess.run(command, shell=True, check=True), output=f"{scratch}/cp1"
        )

    def capture():
        return timed(lambda: made.update(m=store.capture(source, ["."], info=info)))

    first, second = (cp_sync, capture) if cp_first else (capture, cp_sync)
    times = {"cp_sync" if cp_first else "capture": first()}
    times["capture" if cp_first else "cp_sync"] = second()
    times["recapture"] = timed(lambda: store.capture(source, ["."], info=info))
    cold = (source, os.path.join(scratch, "store"))
    cp_plain = lambda: timed(  # noqa: E731
        lambda: subprocess.run(["cp", "-r", source, f"{scratch}/cp2"], check=True),
        cold,
        output=f"{scratch}/cp2",
    )
    restore = lambda: timed(  # noqa: E731
        lambda: store.restore(made["m"].id, f"{scratch}/restored"),
        cold,
        output=f"{scratch}/restored",
    )
    first, second = (cp_plain, restore) if cp_first else (restore, cp_plain)
    times["cp_plain" if cp_first else "restore"] = first()
    times["restore" if cp_first else "cp_plain"] = second()
    shutil.rmtree(scratch)
    subprocess.run(["sync"], check=True)
    return times


def run(scratch: str, total: int, count: int, rounds: int = 1) -> dict:
    source = os.path.join(scratch, "live")
    make_folder(source, total, count)
    time.sleep(1.5)  # leave the files out of the "just written" window, as a saved checkpoint is
    # Rounds alternate which of cp and capture goes first, so drift on a shared disk cancels.
    measured = [
        one_round(source, os.path.join(scratch, f"round{r}"), r % 2 == 0) for r in range(rounds)
    ]
    median = {name: statistics.median(t[name] for t in measured) for name in measured[0]}
    gib = total / 2**30
    return {
        "gib": round(gib, 3),
        "files": count,
        "rounds": rounds,
        "cp_r_sync_s": round(median["cp_sync"], 3),
        "capture_s": round(median["capture"], 3),
        "capture_vs_cp_throughput": round(median["cp_sync"] / median["capture"], 3),
        "unchanged_recapture_s": round(median["recapture"], 4),
        "recapture_vs_cp_time": round(median["recapture"] / median["cp_sync"], 4),
        "cp_r_s": round(median["cp_plain"], 3),
        "restore_s": round(median["restore"], 3),
        "restore_vs_cp_throughput": round(median["cp_plain"] / median["restore"], 3),
        "capture_gib_s": round(gib / median["capture"], 3),
        "restore_gib_s": round(gib / median["restore"], 3),
        "by_position_s": _by_position(measured),
        "per_round_s": [{k: round(v, 3) for k, v in t.items()} for t in measured],
    }


def _by_position(measured: list[dict]) -> dict:
    """Medians of each measure when it ran first and when it ran second in its pair.

    Rounds alternate the order; even rounds run cp first. Comparing nodus and cp in the same
    position shows whether a median ratio owes anything to the order.
    """

    def median(name: str, rounds) -> float:
        return round(statistics.median(measured[r][name] for r in rounds), 3)

    cp_first = range(0, len(measured), 2)
    nodus_first = range(1, len(measured), 2)
    if not nodus_first:
        return {}
    return {
        "first": {
            "cp_sync": median("cp_sync", cp_first),
            "capture": median("capture", nodus_first),
            "cp_plain": median("cp_plain", cp_first),
            "restore": median("restore", nodus_first),
        },
        "second": {
            "cp_sync": median("cp_sync", nodus_first),
            "capture": median("capture", cp_first),
            "cp_plain": median("cp_plain", nodus_first),
            "restore": median("restore", cp_first),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="nodus-bench-", dir=args.dir)
    try:
        # Warm-up: this machine's first touch of memory and of the code paths is slow.
        run(os.path.join(base, "warmup"), 256 * 2**20, args.files)
        shutil.rmtree(os.path.join(base, "warmup"))
        result = run(os.path.join(base, "measured"), int(args.gib * 2**30), args.files, args.rounds)
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
