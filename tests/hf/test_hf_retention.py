"""Rotation under the hf-trainer-v1 integration: the quick-start program, real `nodus` runs.

Four epochs of 12 optimizer steps, a save every 6 and at each epoch end (12, 24, 36, 48), with
tight retention. What each snapshot must hold afterwards is the rule of docs/recovery.md for a run
without pins or branches (:func:`_expected`): the newest is held whole (what a retry or resume
restores), the newest other one keeps its training state, the ``keep_adapters`` newest other
saves whose weights no epoch hold keeps keep theirs, epoch saves keep their weights until
released, and everything else goes.
"""

from __future__ import annotations

import os

import pytest
from runner_e2e_helpers import STEPS, Project

from nodus.store import Manifest, open_store
from nodus.store.restorable import by_recency
from polling import wait_for

pytestmark = [pytest.mark.hf, pytest.mark.slow]

WHOLE = ("weights", "state", "files")
WEIGHTS = ("weights",)


def _expected(manifests: list[Manifest], keep_adapters: int, released: set[int] = frozenset()):
    """{snapshot id: kinds} that rotation leaves (the newest first); a snapshot it leaves no
    kind is gone from the store, so it is not in ``manifests`` (the listing) nor here."""
    newest, *rest = by_recency(manifests)
    epoch = {m.id for m in rest if _epoch_end(m) and m.step not in released}
    counted = [m.id for m in rest if m.id not in epoch][:keep_adapters]
    expected = {newest.id: WHOLE}
    for position, manifest in enumerate(rest):
        if position == 0:  # the newest unheld snapshot keeps its training state
            expected[manifest.id] = WHOLE
        elif manifest.id in epoch or manifest.id in counted:
            expected[manifest.id] = WEIGHTS
    return expected


def _gone_only_by_rotation(project: Project, run: str, manifests: list[Manifest]) -> None:
    """Every committed snapshot that is not listed any more had all its kinds rotated away."""
    events = project.get(run)["events"]
    assert not [e for e in events if e["type"] == "rotation_failed"]
    listed = {m.id for m in manifests}
    rotated: dict[str, set[str]] = {}
    for event in events:
        if event["type"] == "snapshot_kind_deleted":
            rotated.setdefault(event["snapshot"], set()).add(event["kind"])
    committed = {e["snapshot"] for e in events if e["type"] == "snapshot_committed"}
    assert committed - listed, "tight retention removed no snapshot at all"
    for snapshot in committed - listed:
        assert {"weights", "state"} <= rotated.get(snapshot, set()), snapshot


def _epoch_end(manifest: Manifest) -> bool:
    return manifest.epoch is not None and float(manifest.epoch).is_integer()


def _left(manifests: list[Manifest]) -> dict[str, tuple[str, ...]]:
    return {m.id: m.kinds for m in manifests}


def _blob_bytes(project: Project) -> int:
    total = 0
    for folder, _dirs, files in os.walk(project.home / "store" / "blobs"):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


def _referenced_bytes(project: Project) -> int:
    """Bytes of the distinct blobs that a kind some snapshot still holds names, or that a
    model-registry version names (each epoch's weights are one: kept, docs/lineage.md)."""
    store = open_store("file://" + str(project.home / "store"))
    sizes = {}
    for manifest in store.list(role=None):  # checkpoints, the source and the outputs
        for entry in manifest.held_files():
            if not entry.is_link:
                sizes[entry.hash] = entry.size
    for version in store.model_records.list():
        sizes.update((entry.hash, entry.size) for entry in version.files)
    return sum(sizes.values())


def test_many_saves_keep_what_the_rule_says_and_released_epoch_weights_go_next(tmp_path, bare_hash):
    project = Project(tmp_path, keep_recoverable=1, keep_adapters=2)
    runner = project.start("run", str(project.file), "--key", "r")
    wait_for(lambda: 24 in project.committed_steps("r", 1), "step 24 committed", runner)
    paused = project.nodus("runs", "pause", "r", "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=300) == 3  # PAUSED

    # While paused: the pause save is what `runs resume` restores, whole and sound.
    snapshots = project.snapshots("r")
    assert _left(snapshots) == _expected(snapshots, keep_adapters=2)
    target = by_recency(snapshots)[0]
    assert project.get("r")["pause"]["save"]["snapshot"] == target.id
    proc = project.nodus("snapshots", "get", target.id, "--json")
    assert proc.returncode == 0 and '"verified": true' in proc.stdout

    # Released while paused: the next rotation (after the resumed attempt's first commit)
    # lets the weights of the epoch-1 save go; the other epoch saves keep theirs.
    released = project.nodus("snapshots", "release", "r@12")
    assert released.returncode == 0 and "released (epoch hold)" in released.stderr
    resumed = project.nodus("runs", "resume", "r")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    snapshots = project.snapshots("r")
    assert project.committed_steps("r", 2)[-1] == STEPS
    assert _left(snapshots) == _expected(snapshots, keep_adapters=2, released={12})
    left = {m.step: m.kinds for m in snapshots}
    assert 12 not in left and left[24] == left[36] == WEIGHTS and left[STEPS] == WHOLE
    _gone_only_by_rotation(project, "r", snapshots)
    events = project.get("r")["events"]
    assert not [e for e in events if e["type"] == "rotation_failed"]
    assert {"step": 12, "kind": "weights"} in [
        {"step": e["step"], "kind": e["kind"]}
        for e in events
        if e["type"] == "snapshot_kind_deleted"
    ]
    # Bounded: the store holds the blobs of the kinds kept, nothing more.
    assert _blob_bytes(project) == _referenced_bytes(project)
    assert project.outputs_hash("r") == bare_hash  # every restore retention left was whole


def test_killed_four_times_under_keep_one_ends_bit_identical(tmp_path, bare_hash):
    project = Project(tmp_path, write_delay="0.5", keep_recoverable=1, keep_adapters=1)
    runner = project.start("run", str(project.file), "--key", "k")
    kills = (6, 18, 24, 36)  # inside epochs and at the ends of epochs 1 and 2
    for number, step in enumerate(kills, start=1):
        project.kill_after_save("k", number, step, runner)

    assert runner.wait(timeout=600) == 0
    attempts = project.get("k")["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["lost"] * 4 + ["succeeded"]
    assert [a["restored_step"] for a in attempts[1:]] == list(kills)
    assert project.outputs_hash("k") == bare_hash
    snapshots = project.snapshots("k")
    assert _left(snapshots) == _expected(snapshots, keep_adapters=1)
    _gone_only_by_rotation(project, "k", snapshots)
