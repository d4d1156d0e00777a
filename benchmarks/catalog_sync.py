"""What the catalog's ``synchronous=FULL`` costs against SQLite's WAL default, ``NORMAL``.

    .venv/bin/python benchmarks/catalog_sync.py [--writes 500] [--rounds 5] [--steps 300]
                                                [--save-every 25] [--sleep 0.05] [--dir SCRATCH]

Two measures, the two settings alternating round by round, in the same minutes:

- catalog writes: WRITES events added one by one (each its own transaction, as nodus writes)
  to a catalog in SCRATCH: milliseconds a write with each setting (median of the rounds);
- a real run: ``nodus run`` of the shipped counter (STEPS steps of SLEEP seconds, a snapshot
  every SAVE_EVERY steps) with this checkout's ``src`` (FULL) against a copy of it whose catalog
  says ``NORMAL``; the wall time of the whole command, median of the rounds, their ratio, and
  how many events (one write each; phases and attempts are a few more) the run recorded.

SCRATCH (default: a temporary folder) should be on the disk whose cost is wanted: fsync's price
is the disk's.
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

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
sys.path.insert(0, SRC)
# Every interpreter (runner, supervisor, program) with its bytecode cached, as an installed nodus.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from nodus.runner.catalog.core import Catalog  # noqa: E402

FULL = 'self._db.execute("PRAGMA synchronous=FULL")'
NORMAL = 'self._db.execute("PRAGMA synchronous=NORMAL")'


def catalog_writes(scratch: str, writes: int, setting: str) -> float:
    """Seconds per write: ``writes`` events, one transaction each."""
    home = tempfile.mkdtemp(dir=scratch)
    catalog = Catalog(home)
    catalog._db.execute(f"PRAGMA synchronous={setting}")
    run_id = catalog.create_run(
        name="bench", workload={}, store="", key=None, lock_name="l", stage_names=["main"]
    )
    started = time.perf_counter()
    for number in range(writes):
        catalog.add_event(run_id, "snapshot_committed", {"step": number, "snapshot": "x"})
    elapsed = time.perf_counter() - started
    catalog.close()
    shutil.rmtree(home, ignore_errors=True)
    return elapsed / writes


def normal_copy(scratch: str) -> str:
    """A copy of this checkout's ``src`` whose catalog connection says NORMAL."""
    copy = os.path.join(scratch, "src-normal")
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = os.path.join(copy, "nodus", "runner", "catalog", "connection.py")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    assert FULL in text, f"{path} no longer says {FULL}"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace(FULL, NORMAL))
    subprocess.run([sys.executable, "-m", "compileall", "-q", copy], check=True)
    return copy


def a_run(args, scratch: str, src: str) -> tuple[float, int]:
    """Wall seconds of ``nodus run`` of the counter with nodus from ``src``; events recorded."""
    folder = tempfile.mkdtemp(dir=scratch)
    command = [
        sys.executable,
        *("-m", "nodus.testing.counter", "--steps", str(args.steps)),
        *("--save-every", str(args.save_every), "--sleep", str(args.sleep)),
    ]
    with open(os.path.join(folder, "workload.toml"), "w") as handle:
        handle.write(f'name = "bench"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n')
    home = folder + "-home"
    env = dict(os.environ, NODUS_HOME=home, PYTHONPATH=src)
    env.pop("NODUS_STORE", None)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "nodus", "run", "workload.toml", "--key", "bench"],
        cwd=folder,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    elapsed = time.perf_counter() - started
    catalog = Catalog(home)
    events = len(catalog.events(catalog.find_by_key("bench").id))
    catalog.close()
    return elapsed, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    # a save every 1.25 s: each is captured (the settle time is 1 s) and rotated
    parser.add_argument("--save-every", type=int, default=25)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--dir", default=None, help="scratch folder, on the disk to measure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodus-catalog-sync-", dir=args.dir) as scratch:
        subprocess.run([sys.executable, "-m", "compileall", "-q", SRC], check=True)
        normal_src = normal_copy(scratch)
        per_write: dict[str, list[float]] = {"NORMAL": [], "FULL": []}
        runs: dict[str, list[float]] = {"NORMAL": [], "FULL": []}
        events = []
        for number in range(args.rounds):
            order = ("NORMAL", "FULL") if number % 2 == 0 else ("FULL", "NORMAL")
            for setting in order:
                per_write[setting].append(catalog_writes(scratch, args.writes, setting))
                src = normal_src if setting == "NORMAL" else os.path.abspath(SRC)
                wall, count = a_run(args, scratch, src)
                runs[setting].append(wall)
                events.append(count)
            print(
                f"round {number + 1}: a write {per_write['NORMAL'][-1] * 1e3:.3f} / "
                f"{per_write['FULL'][-1] * 1e3:.3f} ms, a run {runs['NORMAL'][-1]:.2f} / "
                f"{runs['FULL'][-1]:.2f} s (NORMAL / FULL)",
                flush=True,
            )
    write = {k: statistics.median(v) * 1e3 for k, v in per_write.items()}
    wall = {k: statistics.median(v) for k, v in runs.items()}
    ratios = [full / normal for full, normal in zip(runs["FULL"], runs["NORMAL"], strict=True)]
    print(
        f"catalog write, median: NORMAL {write['NORMAL']:.3f} ms, FULL {write['FULL']:.3f} ms "
        f"(+{write['FULL'] - write['NORMAL']:.3f} ms a write)"
    )
    print(
        f"nodus run ({args.steps} steps, a snapshot every {args.save_every}), median: "
        f"NORMAL {wall['NORMAL']:.2f} s, FULL {wall['FULL']:.2f} s, "
        f"{wall['FULL'] / wall['NORMAL']:.3f}x (rounds {min(ratios):.3f}-{max(ratios):.3f}x); "
        f"{statistics.median(events):.0f} events a run"
    )


if __name__ == "__main__":
    main()
