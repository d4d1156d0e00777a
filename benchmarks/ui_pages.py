"""``nodus ui`` on a big catalog: each page's answer time, and a training run with a page open.

    .venv/bin/python benchmarks/ui_pages.py [--runs 10000] [--snapshots 1000] [--repeat 5]
                                            [--rounds 3] [--dir SCRATCH]

- pages: a catalog of RUNS runs (recorded through the catalog's own statements: a stage, an
  attempt, a committed-snapshot event and a phase each; one in ten failed, one in fifty with a
  parent) and one run with SNAPSHOTS snapshots really captured into a ``file://`` store (a
  ``checkpoint-<step>`` folder with the Trainer's ``trainer_state.json``, its log history
  growing to SNAPSHOTS steps). ``nodus ui`` serves it (the command, in its own process); each
  page is fetched over HTTP REPEAT times after one warm-up fetch, median reported. Target
  < 0.5 s each.
- a run with a page open: wall of ``nodus run`` of the shipped counter (300 steps of 10 ms, a
  save every 10) in the same home, with nothing watching, and with a poller fetching the runs
  page and the run's page every 2 s (what an open page does); ROUNDS rounds, alternating which
  goes first, the median of the rounds' ratios. Target <= 1.05x.
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
import threading
import time
import urllib.request

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
sys.path.insert(0, SRC)

from nodus.runner.catalog.core import Catalog  # noqa: E402
from nodus.runner.catalog.phases import AttemptOutcome, Phase  # noqa: E402
from nodus.store import SnapshotInfo, open_store  # noqa: E402

NODUS = [sys.executable, "-m", "nodus"]
WORKLOAD = {"name": "bench", "stages": []}


def fabricate(home: str, runs: int) -> None:
    """RUNS finished runs, through the catalog's statements (one transaction each step)."""
    catalog = Catalog(home)
    catalog._db.execute("PRAGMA synchronous=OFF")  # a scratch catalog: no need to sync it
    store = "file://" + os.path.join(home, "store")
    previous = None
    for index in range(runs):
        parent = None
        if index % 50 == 49 and previous:
            parent = {
                "run": previous,
                "snapshot": "ckpt_x",
                "step": 10,
                "stage": "main",
                "mode": "full-state",
            }
        run_id = catalog.create_run(
            name=f"nightly-{index % 37}",
            workload=WORKLOAD,
            store=store,
            key=f"cron-{index}",
            lock_name=f"lock-{index}",
            stage_names=["main"],
            parent=parent,
        )
        number = catalog.start_attempt(run_id, "main", log_path=None)
        failed = index % 10 == 3
        outcome = AttemptOutcome.FAILED if failed else AttemptOutcome.SUCCEEDED
        catalog.end_attempt(
            run_id, "main", number, outcome, "exit status 1" if failed else "exit status 0"
        )
        committed = {"snapshot": f"ckpt_{index:016x}", "step": 10, "reason": "save"}
        catalog.add_event(run_id, "snapshot_committed", committed, stage="main", attempt=number)
        phase = Phase.FAILED if failed else Phase.SUCCEEDED
        catalog.set_phase(run_id, phase, message="exit status 1" if failed else None, stage="main")
        previous = run_id
    catalog.close()


def big_run(home: str, snapshots: int, scratch: str) -> str:
    """One run whose SNAPSHOTS checkpoints are really captured into the home's store."""
    catalog = Catalog(home)
    store_url = "file://" + os.path.join(home, "store")
    run_id = catalog.create_run(
        name="big",
        workload=WORKLOAD,
        store=store_url,
        key="big",
        lock_name="lock-big",
        stage_names=["main"],
    )
    number = catalog.start_attempt(run_id, "main", log_path=None)
    store = open_store(store_url)
    history = []
    for step in range(1, snapshots + 1):
        loss = 2.0 / (1 + step / 100)
        history.append({"step": step, "loss": loss, "learning_rate": 1e-3 * (1 - step / snapshots)})
        folder = os.path.join(scratch, f"checkpoint-{step}")
        os.makedirs(folder)
        with open(os.path.join(folder, "trainer_state.json"), "w") as handle:
            json.dump({"global_step": step, "log_history": history}, handle)
        with open(os.path.join(folder, "state.json"), "w") as handle:
            json.dump({"step": step}, handle)
        info = SnapshotInfo(
            run=run_id, stage="main", attempt=number, step=step, metrics={"loss": loss}
        )
        manifest = store.capture(scratch, [f"checkpoint-{step}"], info=info)
        committed = {"snapshot": manifest.id, "step": step, "reason": "save"}
        catalog.add_event(run_id, "snapshot_committed", committed, stage="main", attempt=number)
        shutil.rmtree(folder)
    catalog.end_attempt(run_id, "main", number, AttemptOutcome.SUCCEEDED, "exit status 0")
    catalog.set_phase(run_id, Phase.SUCCEEDED, stage="main")
    catalog.close()
    return run_id


class Ui:
    """``nodus ui --port 0`` on a home."""

    def __init__(self, home: str) -> None:
        env = dict(os.environ, NODUS_HOME=home, PYTHONPATH=SRC)
        self.proc = subprocess.Popen(
            [*NODUS, "ui", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True
        )
        line = self.proc.stdout.readline()
        self.base = line.rsplit(" ", 1)[-1].strip().rstrip("/")

    def fetch(self, path: str) -> float:
        started = time.perf_counter()
        with urllib.request.urlopen(self.base + path, timeout=60) as answer:
            answer.read()
            assert answer.status == 200, (path, answer.status)
        return time.perf_counter() - started

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def time_pages(ui: Ui, big: str, small: str, repeat: int) -> list[tuple[str, float]]:
    pages = [
        ("runs, newest 100 of all", "/"),
        ("runs, page 51 (offset 5,000)", "/?offset=5000"),
        ("runs, filtered: FAILED, name 'nightly-3'", "/?phase=FAILED&name=nightly-3"),
        ("runs, the live refresh (fragment)", "/?fragment=1"),
        ("a run with one snapshot", f"/runs/{small}"),
        ("the run with the most snapshots", f"/runs/{big}"),
        ("its metric curves", f"/runs/{big}/metrics"),
        ("lineage", "/lineage"),
        ("models", "/models"),
    ]
    results = []
    for label, path in pages:
        ui.fetch(path)  # warm: the store object has read its manifests once
        results.append((label, statistics.median(ui.fetch(path) for _ in range(repeat))))
    return results


def run_with_page(home: str, code: str, ui: Ui | None, watch: bool) -> float:
    env = dict(os.environ, NODUS_HOME=home, PYTHONPATH=SRC)
    stop = threading.Event()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*NODUS, "run", os.path.join(code, "w.toml"), "--quiet"],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    poller = None
    if watch and ui is not None:
        poller = threading.Thread(target=_poller, args=(ui, home, stop), daemon=True)
        poller.start()
    proc.wait()
    elapsed = time.perf_counter() - started
    stop.set()
    if poller is not None:
        poller.join()
    assert proc.returncode == 0, proc.stderr.read()
    return elapsed


def _poller(ui: Ui, home: str, stop: threading.Event) -> None:
    """What an open page does: the runs list and the newest run's page, every 2 s."""
    catalog = Catalog(home, read_only=True)
    while True:
        newest = catalog.list_runs(1)[0].id
        ui.fetch("/?fragment=1")
        ui.fetch(f"/runs/{newest}?fragment=1")
        if stop.wait(2.0):
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--snapshots", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="nodus-ui-bench-", dir=args.dir)
    try:
        home = os.path.join(scratch, "home")
        started = time.perf_counter()
        fabricate(home, args.runs)
        small = Catalog(home).list_runs(1)[0].id
        big = big_run(home, args.snapshots, os.path.join(scratch, "capture"))
        print(
            f"catalog of {args.runs + 1} runs, {args.snapshots} snapshots in {big}: "
            f"made in {time.perf_counter() - started:.0f} s"
        )
        ui = Ui(home)
        try:
            print(f"{'page':<45} median of {args.repeat}")
            for label, seconds in time_pages(ui, big, small, args.repeat):
                print(f"{label:<45} {seconds:.3f} s")
            code = os.path.join(scratch, "code")
            os.makedirs(code)
            command = [
                sys.executable,
                "-m",
                "nodus.testing.counter",
                "--steps",
                "300",
                "--save-every",
                "10",
                "--sleep",
                "0.01",
            ]
            with open(os.path.join(code, "w.toml"), "w") as handle:
                handle.write(
                    f'name = "watched"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n'
                )
            ratios = []
            for index in range(args.rounds):
                order = (False, True) if index % 2 == 0 else (True, False)
                walls = {watch: run_with_page(home, code, ui, watch) for watch in order}
                ratios.append(walls[True] / walls[False])
                print(
                    f"round {index + 1}: alone {walls[False]:.2f} s, page open {walls[True]:.2f} s"
                )
            print(
                f"a run with a page open: {statistics.median(ratios):.3f}x "
                f"(median of {args.rounds} rounds)"
            )
        finally:
            ui.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
