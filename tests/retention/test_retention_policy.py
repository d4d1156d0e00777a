"""Rotation and expiry as pure policies: which kinds of which snapshots go (docs/recovery.md).

Table-driven: each case lists a stage's snapshots, the holds on them, the settings, and the
kinds every snapshot is left with. Snapshots are named by step (``s10``), and a holds entry
names the kinds it holds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from retention_helpers import DIRECTORY, HF, snap

from nodus.retention.holds import Hold, protected_kinds
from nodus.retention.policy import Deletion, expiry, rotation
from nodus.store.manifest import Manifest

W = ("weights",)
STATE = ("state", "files")  # an integration's training state: both go together


def target(kinds=HF) -> Hold:
    return Hold("resume_target", kinds, "a resume would restore it")


def pin(kinds=HF) -> Hold:
    return Hold("pin", kinds, "pinned by someone@host")


EPOCH = Hold("epoch", W, "weights of an epoch save")


@dataclass
class Case:
    id: str
    snapshots: list[Manifest]
    holds: dict[str, list[Hold]]
    left: dict[str, tuple[str, ...]]  # kinds each snapshot still holds afterwards
    keep_recoverable: int = 1
    keep_adapters: int = 2
    ignored: list[Manifest] = field(default_factory=list)  # sources, outputs


def _steps(*steps: int, **options) -> list[Manifest]:
    return [snap(step, name=f"s{step}", **options) for step in steps]


def _cases() -> list[Case]:
    first_capture = snap(20, name="s20a", created=2.0)
    return [
        Case(
            "the held resume target is kept and not counted",
            _steps(10, 20, 30, 40, 50),
            {"s50": [target()]},
            {"s50": HF, "s40": HF, "s30": W, "s20": (), "s10": ()},
        ),
        Case(
            "no hold: the newest count",
            _steps(10, 20, 30),
            {},
            {"s30": HF, "s20": W, "s10": ()},
        ),
        Case(
            "a pin keeps an early snapshot whole",
            _steps(10, 20, 30, 40, 50),
            {"s10": [pin()], "s50": [target()]},
            {"s50": HF, "s40": HF, "s30": W, "s20": (), "s10": HF},
        ),
        Case(
            "epoch saves keep their weights, which do not count toward keep_adapters",
            [
                snap(step, name=f"s{step}", epoch=step / 12)
                for step in (6, 12, 18, 24, 30, 36, 42, 48)
            ],
            {"s12": [EPOCH], "s24": [EPOCH], "s36": [EPOCH], "s48": [EPOCH, target()]},
            {
                "s48": HF,
                "s42": HF,
                "s36": W,
                "s30": W,
                "s24": W,
                "s18": (),
                "s12": W,
                "s6": (),
            },
        ),
        Case(
            "a hold on part of the training state keeps all of it, and is not counted",
            _steps(10, 20, 30),
            {"s10": [pin(("state",))], "s30": [target()]},
            {"s30": HF, "s20": HF, "s10": STATE},
            keep_adapters=1,
        ),
        Case(
            "a superseded capture counts for nothing and loses its unheld kinds",
            [snap(10, name="s10", created=1.0), first_capture, snap(20, name="s20", created=3.0)],
            {"s20": [target()]},
            {"s20": HF, "s10": HF, "s20a": ()},
        ),
        Case(
            "a superseded capture keeps what a pin names",
            [snap(10, name="s10", created=1.0), first_capture, snap(20, name="s20", created=3.0)],
            {"s20": [target()], "s20a": [pin(W)]},
            {"s20": HF, "s10": HF, "s20a": W},
        ),
        Case(
            "after `runs resume --step 10` the new attempt's saves are the newest",
            [
                *_steps(10, 20, 30, 40, attempt=1),
                snap(20, attempt=2, name="a2s20"),
            ],
            {"a2s20": [target()]},
            {"a2s20": HF, "s40": HF, "s30": W, "s20": (), "s10": ()},
        ),
        Case(
            "keep 0: only what a retry would restore stays",
            _steps(10, 20, 30),
            {"s30": [target()]},
            {"s30": HF, "s20": (), "s10": ()},
            keep_recoverable=0,
            keep_adapters=0,
        ),
        Case(
            "a directory-contract snapshot's files are its training state",
            _steps(10, 20, 30, 40, kinds=DIRECTORY),
            {"s40": [target(DIRECTORY)]},
            {"s40": DIRECTORY, "s30": DIRECTORY, "s20": (), "s10": ()},
        ),
        Case(
            "a directory-contract folder with a state-named file keeps or loses both",
            _steps(10, 20, 30, kinds=("state", "files")),
            {"s30": [target(("state", "files"))]},
            {"s30": STATE, "s20": STATE, "s10": ()},
        ),
        Case(
            "a snapshot kept to recover from keeps its weights: no trainer resumes without them",
            _steps(10, 20, 30, 40),
            {"s40": [target()]},
            {"s40": HF, "s30": HF, "s20": HF, "s10": ()},
            keep_recoverable=2,
            keep_adapters=0,
        ),
        Case(
            "a weights branch holds the weights only",
            _steps(10, 20, 30),
            {"s10": [Hold("branch", W, "run_b started from it")], "s30": [target()]},
            {"s30": HF, "s20": HF, "s10": W},
            keep_adapters=1,
        ),
        Case(
            "a kind already marked is never named again; what cannot restore loses its rest",
            [snap(10, name="s10", deleted=("state",)), *_steps(20, 30)],
            {"s30": [target()]},
            {"s30": HF, "s20": HF, "s10": W},
        ),
        Case(
            "sources and outputs are never considered",
            _steps(10, 20),
            {"s20": [target()]},
            {"s20": HF, "s10": HF},
            ignored=[
                snap(None, role="source", kinds=DIRECTORY, name="src"),
                snap(None, role="outputs", kinds=HF, name="out"),
            ],
        ),
    ]


def _left(snapshots: list[Manifest], deletions: list[Deletion]) -> dict[str, tuple[str, ...]]:
    gone = {(d.snapshot_id, d.kind) for d in deletions}
    return {m.id: tuple(k for k in m.kinds if (m.id, k) not in gone) for m in snapshots}


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case.id)
def test_rotation_leaves_each_snapshot_the_expected_kinds(case: Case):
    deletions = rotation(
        case.snapshots + case.ignored,
        case.holds,
        keep_recoverable=case.keep_recoverable,
        keep_adapters=case.keep_adapters,
    )
    assert _left(case.snapshots, deletions) == case.left
    assert {d.snapshot_id for d in deletions} <= {m.id for m in case.snapshots}
    assert all(d.reason == "rotation" for d in deletions)


def test_multi_stage_runs_rotate_each_stage_on_its_own():
    first = [snap(step, stage="prepare", name=f"p{step}") for step in (10, 20, 30)]
    second = [snap(step, stage="train", name=f"t{step}") for step in (10, 20)]
    deletions = rotation(first + second, {"t20": [target()]}, keep_recoverable=1, keep_adapters=2)
    assert _left(first + second, deletions) == {
        "p30": HF,  # a finished stage: nothing of it is a resume target any more
        "p20": W,
        "p10": (),
        "t20": HF,
        "t10": HF,
    }


def test_a_deletion_names_its_snapshot_kind_and_step_oldest_first():
    snapshots = _steps(10, 20, 30, kinds=DIRECTORY)
    held = {"s30": [target(DIRECTORY)]}
    deletions = rotation(snapshots, held, keep_recoverable=0, keep_adapters=0)
    assert deletions == [
        Deletion("s10", "files", 10, "rotation"),
        Deletion("s20", "files", 20, "rotation"),
    ]


def test_rotation_never_names_a_held_kind_or_one_already_gone():
    rng = random.Random(12)
    hold_types = [target(), pin(), pin(W), EPOCH, Hold("branch", W, ""), Hold("model", W, "")]
    named = spared = gone_before = 0  # how much of the property the cases exercise
    for _ in range(300):
        snapshots = [
            snap(
                rng.randrange(0, 60, 5),
                attempt=rng.randint(1, 3),
                kinds=rng.choice([HF, DIRECTORY, W, ("state",), ("weights", "state")]),
                deleted=tuple(rng.sample(HF, rng.randint(0, 1))),
                stage=rng.choice(["a", "b"]),
            )
            for _ in range(rng.randint(1, 12))
        ]
        holds = {m.id: rng.sample(hold_types, rng.randint(0, 2)) for m in snapshots}
        keeps = {"keep_recoverable": rng.randint(0, 3), "keep_adapters": rng.randint(0, 3)}
        deletions = rotation(snapshots, holds, **keeps)
        by_id = {m.id: m for m in snapshots}
        for deletion in deletions:
            manifest = by_id[deletion.snapshot_id]
            assert deletion.kind in manifest.kinds
            assert deletion.kind not in protected_kinds(holds[manifest.id])
        assert len(set(deletions)) == len(deletions)
        named += len(deletions)
        # The kinds the holds spared: what the same rotation names with no hold at all.
        unheld = rotation(snapshots, {m.id: [] for m in snapshots}, **keeps)
        spared += sum(d.kind in protected_kinds(holds[d.snapshot_id]) for d in unheld)
        gone_before += sum(bool(m.deleting & set(m.stored_kinds)) for m in snapshots)
    # Not vacuous: rotation named kinds, holds kept some it would have named, and some
    # snapshots had a kind gone already (a rotation returning nothing fails here).
    assert named > 100 and spared > 20 and gone_before > 100, (named, spared, gone_before)


# --- expiry -------------------------------------------------------------------------------------

DAY = 86_400.0
FINISHED = 1_800_000_000.0


def _finished_run() -> tuple[list[Manifest], dict[str, list[Hold]]]:
    snapshots = [
        *_steps(10, 20, 30),
        snap(None, role="source", kinds=DIRECTORY, name="src"),
        snap(None, role="outputs", kinds=HF, name="out"),
    ]
    holds = {"s10": [pin(("state",))], "s30": [Hold("model", W, "the model of run_a")]}
    return snapshots, holds


@pytest.mark.parametrize(
    ("finished_at", "days", "now", "expired"),
    [
        (None, 7, FINISHED + 100 * DAY, False),  # unfinished: nothing expires
        (FINISHED, 7, FINISHED + 7 * DAY - 1, False),
        (FINISHED, 7, FINISHED + 7 * DAY, True),
        (FINISHED, 0, FINISHED, True),  # 0 days: at the next gc
    ],
    ids=["unfinished", "before-the-deadline", "at-the-deadline", "zero-days"],
)
def test_expiry_takes_every_unheld_kind_once_the_days_have_passed(finished_at, days, now, expired):
    snapshots, holds = _finished_run()
    deletions = expiry(snapshots, holds, finished_at=finished_at, retention_days=days, now=now)
    if not expired:
        assert deletions == []
        return
    assert all(d.reason == "expiry" for d in deletions)
    assert _left(snapshots, deletions) == {
        "s10": ("state",),  # what the pin names
        "s20": (),
        "s30": W,  # the run's model: until the run is deleted
        "src": DIRECTORY,  # sources and outputs go only with their run
        "out": HF,
    }


def test_expiry_reads_the_catalogs_timestamps():
    snapshots, holds = _finished_run()
    finished = "2026-12-01T10:00:00.000Z"
    assert expiry(snapshots, holds, finished_at=finished, retention_days=1, now=finished) == []
    later = "2026-12-02T10:00:00.000Z"
    assert expiry(snapshots, holds, finished_at=finished, retention_days=1, now=later)
