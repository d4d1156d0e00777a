"""Recovery of two checkouts of nodus, round by round: which one recovers faster.

    .venv/bin/python benchmarks/recovery_ab.py --b /path/to/other/checkout/src [--a SRC]
                                               [--repeat 15] [--source-files 0]
                                               [--source-kib 4]

Each round takes a cold start of the counter (as ``benchmarks/runner.py --recovery-only`` does)
and a recovery under each checkout (``PYTHONPATH`` names its ``src``; the order alternates from
round to round), so a drift of the machine's speed hits both alike. Reported: each checkout's
median recovery over the round's cold start, and the median of the rounds' A/B ratios. ``--a``
defaults to the ``src`` next to this script; make the other checkout with ``git worktree add``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner as bench

HERE_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a", default=HERE_SRC, help="src folder of checkout A")
    parser.add_argument("--b", required=True, help="src folder of checkout B")
    parser.add_argument("--repeat", type=int, default=15)
    bench.add_source_options(parser)
    args = parser.parse_args()
    work = argparse.Namespace(
        steps=400,
        sleep=0.025,
        save_every=50,
        state_mib=64,
        source_files=args.source_files,
        source_kib=args.source_kib,
    )
    ratios: dict[str, list[float]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.repeat):
            os.environ.pop("PYTHONPATH", None)
            cold = bench.cold_start(work, scratch)
            for name in ("A", "B") if number % 2 == 0 else ("B", "A"):
                os.environ["PYTHONPATH"] = os.path.abspath(args.a if name == "A" else args.b)
                ratios[name].append(bench.recovery(work, scratch) / cold)
    for name, values in ratios.items():
        quartiles = [round(q, 3) for q in statistics.quantiles(values, n=4)]
        print(f"{name}: recovery / cold start {statistics.median(values):.3f}x {quartiles}")
    paired = statistics.median(a / b for a, b in zip(ratios["A"], ratios["B"], strict=True))
    print(f"A / B, median of the rounds: {paired:.3f}")


if __name__ == "__main__":
    main()
