"""Power cuts at random moments of nodus commands, on LazyFS: what nodus acknowledged survives.

    .venv/bin/python benchmarks/power_cuts.py [--rounds 21] [--seed 0] [--dir SCRATCH]
                                              [--b <src folder>]

Each round is tests/power/cuts.py's five cuts on one machine whose disk is a LazyFS mount
(``$NODUS_HOME``: catalog, store, work folders): ``nodus run`` once it has committed snapshots,
the run continued just after a commit (rotation deleting), ``snapshots download``, ``gc`` and
``runs delete``; after each cut a reboot (LazyFS mounted again) and the checks: every
acknowledged run, phase, deletion, snapshot, gc expiry (its event) and download is there, the
store verifies, every committed snapshot restores; each interrupted run then ends as an
uninterrupted one does. Printed: the counts, and every loss (the exit status is 1 if any).

``--b`` runs the same cuts with another checkout's ``src`` (the commit before the catalog's
``synchronous=FULL``, to see what the checks catch). Needs /dev/fuse and LazyFS, built from
``../shared/tools/lazyfs`` (tests/power/lazyfs.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "power"))
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21, help="rounds of five cuts")
    parser.add_argument("--seed", type=int, default=0, help="the random moments' seed")
    parser.add_argument("--dir", default=None, help="scratch folder (the backing disk)")
    parser.add_argument("--b", default=None, help="another checkout's src folder to cut instead")
    args = parser.parse_args()
    src = os.path.abspath(args.b) if args.b else str(HERE.parent / "src")
    sys.path.insert(0, src)
    os.environ["PYTHONPATH"] = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])

    from cuts import Box, summary
    from lazyfs import unavailable

    why = unavailable()
    if why is not None:
        print(f"power cuts need LazyFS: {why}", file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nodus-power-", dir=args.dir) as scratch:
        box = Box(Path(scratch), seed=args.seed)
        try:
            for number in range(1, args.rounds + 1):
                try:
                    box.round()
                except AssertionError as error:  # a run that did not end: a loss of its own
                    box.problems.append(f"round {number} stopped: {error}")
                print(
                    f"round {number}/{args.rounds}: {box.counts['cuts']} cuts, "
                    f"{len(box.problems)} lost or broken, {time.monotonic() - started:.0f} s",
                    flush=True,
                )
        finally:
            box.close()
    print(f"nodus from {src}, seed {args.seed}, {time.monotonic() - started:.0f} s")
    print(summary(box.counts, box.problems, box.ledger))
    for problem in box.problems:
        print(problem)
    return 1 if box.problems else 0


if __name__ == "__main__":
    sys.exit(main())
