"""Start-up: `nodus run` of a one-line program over the bare program, the source capture of an
unchanged folder, and the answer time of `nodus validate` and `nodus runs list`.

    .venv/bin/python benchmarks/startup.py [--repeat 5] [--files 1000] [--dir SCRATCH]
                                           [--b OTHER_CHECKOUT/src] [--history N]

- run overhead: wall of `nodus run` of a workload whose program prints one line (a small folder:
  the program and the workload file), minus the wall of the same program run bare; target
  <= 0.2 s. Twice: the same file run again (as from cron: its resolution is remembered), and a
  file never run before (checked and resolved anew). With ``--history N``, each home's store
  holds the source snapshots of N earlier runs first (a nightly job's home after a while).
- source capture, unchanged: a folder of FILES small files captured as a run's source by a
  fresh store object (as every `nodus run` does) into a store that already holds them all from
  an earlier run; target <= 0.1 s.
- `nodus validate` and `nodus runs list` (a catalog of REPEAT + 1 runs); target < 0.3 s each.
- the run path's imports: a fresh interpreter importing the modules `nodus run` imports (every
  nodus module it loads, found by a `nodus run` of the same program, and what they import), and
  within that the time the standard library's ``dataclasses`` takes to build nodus's classes (it
  compiles each class's generated methods when the module is imported).

Every command is a fresh interpreter with its bytecode cache written (as an installed nodus).
The run overheads are taken round by round (the bare program, then each `nodus run`, one after
the other) and their medians reported, so a drift of the machine's speed hits both sides of a
difference alike; the other figures are medians of REPEAT. With ``--b``, each round also runs
the `nodus run`s of another checkout (its ``src``, made with ``git worktree add``, with a home
of its own), the two in alternating order: its overheads and the median of the rounds'
differences are reported beside.
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

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
sys.path.insert(0, SRC)

from nodus.store import SnapshotInfo, open_store  # noqa: E402

WORKLOAD = """name = "startup"
command = ["{python}", "train.py"]
continuity = "restartable"
"""


def environment(home: str) -> dict[str, str]:
    env = {**os.environ, "NODUS_HOME": home, "PYTHONPATH": os.path.abspath(SRC)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed nodus has its bytecode cached
    return env


def timed(command: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def median_of(repeat: int, command: list[str], cwd: str, env: dict[str, str]) -> float:
    timed(command, cwd, env)  # warm: bytecode written, page cache filled
    return statistics.median(timed(command, cwd, env) for _ in range(repeat))


def first_run(command: list[str], cwd: str, env: dict[str, str]) -> float:
    """Time of ``nodus run`` of a workload file never run before (its text changed by a
    comment): checked and resolved anew, nothing remembered."""
    path = os.path.join(cwd, "nodus.toml")
    with open(path) as handle:
        text = handle.read()
    with open(path, "w") as handle:
        handle.write(f"{text}# {time.time_ns()}\n")
    try:
        return timed(command, cwd, env)
    finally:
        with open(path, "w") as handle:
            handle.write(text)


def run_overheads(
    repeat: int, folder: str, envs: dict[str, dict[str, str]]
) -> dict[str, dict[str, list[float]]]:
    """Per checkout, each round's overhead of `nodus run` (the same file again, and a new
    file) over the bare program of the same round."""
    nodus = [sys.executable, "-m", "nodus", "run", "nodus.toml"]
    bare_command = [sys.executable, "train.py"]
    found = {name: {"again": [], "new": []} for name in envs}
    for env in envs.values():
        timed(nodus, folder, env)  # warm: bytecode written, the resolution remembered
    for number in range(repeat):
        bare = timed(bare_command, folder, next(iter(envs.values())))
        order = list(envs) if number % 2 == 0 else list(reversed(envs))
        for name in order:
            found[name]["again"].append(timed(nodus, folder, envs[name]) - bare)
            found[name]["new"].append(first_run(nodus, folder, envs[name]) - bare)
    return found


_IMPORTS = """
import dataclasses, sys, time
building = [0.0, 0]
process_class = dataclasses._process_class


def timed_process_class(*args, **kwargs):
    started = time.perf_counter()
    try:
        return process_class(*args, **kwargs)
    finally:
        building[0] += time.perf_counter() - started
        building[1] += 1


dataclasses._process_class = timed_process_class
started = time.perf_counter()
for name in sys.argv[1:]:
    __import__(name)
print(time.perf_counter() - started, building[0], building[1])
"""

_LOADED = """
import atexit, runpy, sys
listing = sys.argv[1]


def write_loaded():
    with open(listing, "w") as handle:
        handle.write(" ".join(sorted(n for n in sys.modules if n.startswith("nodus"))))


atexit.register(write_loaded)
sys.argv = ["nodus", "run", "nodus.toml"]
runpy.run_module("nodus", run_name="__main__")
"""


def run_path_imports(folder: str, env: dict[str, str], repeat: int) -> dict[str, float]:
    """Median seconds of importing what `nodus run` imports, and of building its dataclasses."""
    listing = os.path.join(folder, "..", "loaded.txt")
    subprocess.run(
        [sys.executable, "-c", _LOADED, listing],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
    )
    with open(listing) as handle:
        modules = handle.read().split()
    found = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", _IMPORTS, *modules], env=env, capture_output=True, text=True
        ).stdout.split()
        found.append((float(out[0]), float(out[1]), int(out[2])))
    return {
        "modules": len(modules),
        "imports_s": statistics.median(f[0] for f in found),
        "dataclasses_s": statistics.median(f[1] for f in found),
        "classes": found[0][2],
    }


def earlier_runs(store_path: str, count: int, scratch: str) -> None:
    """``count`` source snapshots of as many earlier runs in the store (a home with a history:
    a nightly job's year), captured through this checkout's library."""
    if not count:
        return
    store = open_store("file://" + store_path)
    folder = os.path.join(scratch, "earlier")
    os.makedirs(folder, exist_ok=True)
    for number in range(count):
        with open(os.path.join(folder, "train.py"), "w") as handle:
            handle.write(f'print("run {number}")\n')
        info = SnapshotInfo(f"run_{number:012x}", None, 0, None, role="source")
        store.capture(folder, ["train.py"], info=info)


def source_capture(scratch: str, files: int, repeat: int) -> float:
    """Median time of capturing an unchanged folder of ``files`` files by a fresh store object."""
    folder = os.path.join(scratch, "source")
    os.makedirs(os.path.join(folder, "pkg"))
    for index in range(files):
        with open(os.path.join(folder, "pkg", f"module_{index}.py"), "w") as handle:
            handle.write(f"VALUE = {index}\n" * 40)
    url = "file://" + os.path.join(scratch, "store")
    info = SnapshotInfo(run="run_bench", stage=None, attempt=0, step=None, role="source")
    open_store(url).capture(folder, ["."], info=info)  # the first run stores every file
    times = []
    for _ in range(repeat):
        store = open_store(url)
        started = time.perf_counter()
        store.capture(folder, ["."], info=info)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--b", default=None, help="src folder of another checkout to compare")
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="snapshots of earlier runs in each home's store before the rounds (default 0)",
    )
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="nodus-startup-", dir=args.dir)
    try:
        folder = os.path.join(scratch, "program")
        os.makedirs(folder)
        with open(os.path.join(folder, "train.py"), "w") as handle:
            handle.write('print("hello")\n')
        with open(os.path.join(folder, "nodus.toml"), "w") as handle:
            handle.write(WORKLOAD.format(python=sys.executable))
        env = environment(os.path.join(scratch, "home"))
        envs = {"A": env}
        if args.b:
            envs["B"] = {**environment(os.path.join(scratch, "home-b")), "PYTHONPATH": args.b}
        for each in envs.values():
            earlier_runs(os.path.join(each["NODUS_HOME"], "store"), args.history, scratch)
        nodus = [sys.executable, "-m", "nodus"]
        bare = median_of(args.repeat, [sys.executable, "train.py"], folder, env)
        overheads = run_overheads(args.repeat, folder, envs)
        validate = median_of(args.repeat, [*nodus, "validate", "nodus.toml"], folder, env)
        listing = median_of(args.repeat, [*nodus, "runs", "list"], folder, env)
        capture = source_capture(scratch, args.files, args.repeat)
        imports = run_path_imports(folder, env, args.repeat)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "bare_program_s": round(bare, 3),
        "run_overhead_s": round(statistics.median(overheads["A"]["again"]), 3),
        "run_overhead_new_workload_s": round(statistics.median(overheads["A"]["new"]), 3),
        f"source_capture_unchanged_{args.files}_files_s": round(capture, 4),
        "validate_s": round(validate, 3),
        "runs_list_s": round(listing, 3),
        "run_path_nodus_modules": imports["modules"],
        "run_path_imports_s": round(imports["imports_s"], 3),
        "of_which_dataclasses_s": round(imports["dataclasses_s"], 3),
        "dataclasses_built": imports["classes"],
    }
    if args.b:
        for kind in ("again", "new"):
            a, b = overheads["A"][kind], overheads["B"][kind]
            report[f"b_run_overhead_{kind}_s"] = round(statistics.median(b), 3)
            paired = statistics.median(x - y for x, y in zip(a, b, strict=True))
            report[f"a_minus_b_{kind}_s"] = round(paired, 3)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
