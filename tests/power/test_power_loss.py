"""What nodus acknowledged survives a power loss (docs/store.md, "Durability"), shown with LazyFS.

Ten cuts: two rounds of tests/power/cuts.py's five (``nodus run`` once it has snapshots, the run
continued while rotation deletes, ``snapshots download``, ``gc``, ``runs delete``), each followed
by a reboot and the checks of ``Box.check``; the run then ends as an uninterrupted one.
benchmarks/power_cuts.py makes a hundred and more (docs/benchmarks.md, "Durability").

Skipped, saying why, where there is no ``/dev/fuse`` or LazyFS cannot be built; ``.ci/run``
builds it from ``../shared/tools/lazyfs`` first.
"""

from __future__ import annotations

import random

import pytest
from cuts import CUTS, Box, summary
from lazyfs import unavailable

pytestmark = pytest.mark.slow

ROUNDS = 2


@pytest.fixture
def box(tmp_path):
    why = unavailable()
    if why is not None:
        pytest.skip(f"power cuts need LazyFS: {why}")
    seed = random.randrange(1 << 30)
    try:
        made = Box(tmp_path / "box", seed=seed)
    except RuntimeError as error:  # the FUSE mount itself refused here
        pytest.skip(f"power cuts need a LazyFS mount: {error}")
    yield made
    made.close()


def test_every_acknowledged_run_phase_deletion_and_snapshot_survives_power_cuts(box):
    for _ in range(ROUNDS):
        box.round()
    report = f"seed {box.rng_seed}\n{summary(box.counts, box.problems, box.ledger)}"
    assert box.problems == [], report + "\n" + "\n".join(box.problems)
    missed = box.counts["rotation cuts missed: the run had ended"]
    assert box.counts["cuts"] == ROUNDS * len(CUTS) - missed, report
    assert box.counts["runs ended equal to an uninterrupted run"] == ROUNDS, report
    assert box.counts["phases checked"] and box.counts["deletions checked"], report
    assert box.counts["committed snapshots verified and restored"], report
