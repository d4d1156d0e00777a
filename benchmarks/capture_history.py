"""Capture of one checkpoint folder with many earlier checkpoint folders present vs none.

    .venv/bin/python benchmarks/capture_history.py [--history 1000] [--rounds 5] [--dir SCRATCH]

A directory-contract program that keeps every checkpoint folder leaves ``state/`` with one
``checkpoint-<step>`` folder per save. Each capture takes the newest one alone (one generation of
state per snapshot), so its cost must not depend on how many older ones lie next to it.

The runner's own capture loop (``nodus.runner.capture.capturer.Capturer``, a real catalog and a
``file://`` store) captures a fresh ``checkpoint-<step>`` of FILES files of FILE_KIB each, in a
working copy whose ``state/`` holds HISTORY earlier folders (3 small files each) or none. Rounds
alternate which goes first; medians are reported, and the median of the rounds' ratios.
Target: with history <= 1.1x without.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from nodus.runner.capture.capturer import Capturer
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Catalog
from nodus.runner.workspace.layout import Workspace
from nodus.schemas.resolved import (
    ResolvedContinuity,
    ResolvedExecution,
    ResolvedStage,
)
from nodus.store import open_store


def stage() -> ResolvedStage:
    return ResolvedStage(
        name="main",
        command=("true",),
        code="/",
        env={},
        outputs=(),
        integration=None,
        continuity=ResolvedContinuity("checkpointed", True, ("state", "progress.json")),
        execution=ResolvedExecution(50, False, 1, 3, 10, 5.0, 7),
    )


def write_folder(ws: Workspace, step: int, files: int, size: int) -> None:
    folder = os.path.join(ws.state, f"checkpoint-{step}")
    os.makedirs(folder)
    for index in range(files):
        with open(os.path.join(folder, f"part-{index}.bin"), "wb") as handle:
            handle.write(os.urandom(size))


class Setup:
    """One working copy, catalog and store; ``history`` earlier folders in its state/."""

    def __init__(self, root: str, history: int) -> None:
        self.catalog = Catalog(os.path.join(root, "home"))
        self.run_id = self.catalog.create_run(
            name="w", workload={}, store="", key=None, lock_name="l", stage_names=["main"]
        )
        self.store = open_store("file://" + os.path.join(root, "store"))
        self.ws = Workspace(os.path.join(root, "attempt"))
        self.ws.make_private_folders()
        for step in range(1, history + 1):
            write_folder(self.ws, step, 3, 1024)
        number = self.catalog.start_attempt(self.run_id, "main")
        context = AttemptContext(self.store, self.catalog, self.run_id, stage(), number)
        self.capturer = Capturer(context, self.ws)
        self.next_step = history + 1_000_000

    def capture_new(self, files: int, size: int) -> float:
        """Time of one capture of a new checkpoint folder (the folder is removed after)."""
        step = self.next_step
        self.next_step += 1
        write_folder(self.ws, step, files, size)
        started = time.perf_counter()
        snapshot = self.capturer.capture(step, reason="save")
        elapsed = time.perf_counter() - started
        assert snapshot is not None, "the capture was not committed"
        shutil.rmtree(os.path.join(self.ws.state, f"checkpoint-{step}"))
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--file-kib", type=int, default=1024)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="nodus-history-", dir=args.dir)
    try:
        none = Setup(os.path.join(scratch, "none"), 0)
        many = Setup(os.path.join(scratch, "many"), args.history)
        size = args.file_kib * 1024
        none.capture_new(args.files, size)  # warm-up: imports, first store writes
        many.capture_new(args.files, size)
        times: dict[str, list[float]] = {"none": [], "many": []}
        for index in range(args.rounds):
            order = [("none", none), ("many", many)]
            for name, setup in order if index % 2 == 0 else reversed(order):
                times[name].append(setup.capture_new(args.files, size))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    none_s, many_s = statistics.median(times["none"]), statistics.median(times["many"])
    print(
        json.dumps(
            {
                "history": args.history,
                "checkpoint_bytes": args.files * size,
                "capture_none_s": round(none_s, 4),
                f"capture_{args.history}_s": round(many_s, 4),
                "ratio": round(many_s / none_s, 3),
                # the rounds' own ratios (each pair taken back to back): a drift hits both
                "ratio_paired": round(
                    statistics.median(m / n for m, n in zip(times["many"], times["none"])), 3
                ),
                "rounds": {name: [round(t, 4) for t in ts] for name, ts in times.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
