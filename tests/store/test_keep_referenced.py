"""What a run keeps is never deleted under it (issue 39.3).

The store is content-addressed: a checkpoint, the run's outputs, its source, another run's
snapshots and a model version may all name one blob. No deletion (rotation, expiry, `runs
delete`, gc) frees a blob while any live record names it, however the folders overlap; and
`store verify` checks the blobs of every record, outputs and model versions included.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from nodus.errors import NotFoundError, StoreError
from nodus.store import SnapshotInfo, keys, open_store, sweep
from nodus.store.model_records import ModelVersion
from nodus.store.upload import Uploader

from .trees import read_tree, write_tree


def content(label: str) -> bytes:
    """Deterministic bytes for ``label``; equal labels give equal files (one shared blob)."""
    seed = hashlib.sha256(label.encode()).digest()
    return seed * (8 + seed[0] % 32)


def _checkpoint_files(step: int) -> dict[str, bytes]:
    """What a Trainer leaves in ``state/checkpoint-<step>``; config and tokenizer never change."""
    folder = f"state/checkpoint-{step}"
    return {
        f"{folder}/model.safetensors": content(f"model-{step}"),
        f"{folder}/optimizer.pt": content(f"opt-{step}"),
        f"{folder}/trainer_state.json": content(f"ts-{step}"),
        f"{folder}/config.json": content("config"),
        f"{folder}/tokenizer.json": content("tokenizer"),
        f"{folder}/notes.txt": content(f"notes-{step}"),
    }


def _trainer_run(store, live: Path, run: str = "r", steps=(10, 20, 30)):
    """Checkpoints of ``state`` (as rotation sees them), then ``state`` again as the outputs:
    the usual layout of a Trainer's --output_dir, both checkpoint path and outputs."""
    checkpoints = []
    for step in steps:
        write_tree(live, _checkpoint_files(step))
        info = SnapshotInfo(run=run, stage="main", attempt=1, step=step)
        checkpoints.append(store.capture(str(live), ["state"], info=info))
    write_tree(live, {"state/model.safetensors": content(f"model-{steps[-1]}")})
    info = SnapshotInfo(run=run, stage="main", attempt=1, step=None, role="outputs")
    outputs = store.capture(str(live), ["state"], info=info)
    return checkpoints, outputs


def _restores_whole(store, manifest, scratch: Path, expected: dict) -> None:
    store.restore(manifest.id, str(scratch))  # verifies every hash
    assert read_tree(scratch) == expected


def test_rotation_expiry_and_gc_of_the_checkpoints_leave_every_output_file(store, tmp_path):
    live = tmp_path / "live"
    checkpoints, outputs = _trainer_run(store, live)
    expected = read_tree(live)
    shared = {e.hash for c in checkpoints for e in c.files} & {e.hash for e in outputs.files}
    assert shared == {e.hash for e in outputs.files}  # every output file is a checkpoint's too

    # Rotation: every kind of the older checkpoints, one at a time.
    for manifest in checkpoints[:-1]:
        for kind in manifest.stored_kinds:
            report = store.delete_kind(manifest.id, kind)
            assert not report.deferred
    _restores_whole(store, outputs, tmp_path / "after-rotation", expected)
    # Expiry of the newest, then whatever gc finds.
    store.delete(checkpoints[-1].id, reason="expiry")
    store.finish_deletions()
    store.gc_blobs(grace_s=0.0)
    assert store.list(role="checkpoint") == []
    _restores_whole(store, outputs, tmp_path / "after-expiry", expected)
    report = store.verify()
    assert report.sound and not report.damaged, report.lines()
    # What no record names any more did go: the store is not kept whole by never deleting.
    on_disk = {keys.hash_of_blob_key(i.key) for i in store.storage.list(keys.BLOBS)}
    assert on_disk == {e.hash for e in outputs.files if not e.is_link}


def test_deleting_one_runs_snapshots_keeps_what_another_runs_records_name(tmp_path):
    store = open_store("file://" + str(tmp_path / "store"))
    a_checkpoints, a_outputs = _trainer_run(store, tmp_path / "a", run="run_a")
    # Run B trained on from A's step 20: the same files, its own snapshots and outputs.
    b_checkpoints, b_outputs = _trainer_run(store, tmp_path / "b", run="run_b", steps=(20, 40))
    source = store.capture(
        str(tmp_path / "b"),
        ["state/checkpoint-20/config.json"],
        info=SnapshotInfo(run="run_b", stage=None, attempt=1, step=None, role="source"),
    )
    weights = tuple(e for e in a_checkpoints[-1].files if e.kind == "weights")
    version = ModelVersion("tiny", 1, "run_a", a_checkpoints[-1].id, "main", 30, None, "manual",
                           1.0, weights)  # fmt: skip
    store.add_model_version(version)
    b_expected = {m.id: read_tree(tmp_path / "b") for m in [b_outputs]}

    # `nodus runs delete run_a`: every snapshot of the run, whole (runner/upkeep/gc.py).
    for manifest in store.list(run="run_a", role=None):
        store.delete(manifest.id, reason="run deleted")
    store.finish_deletions()
    store.gc_blobs(grace_s=0.0)

    assert store.list(run="run_a", role=None) == []
    _restores_whole(store, b_outputs, tmp_path / "b-out", b_expected[b_outputs.id])
    for manifest in [*b_checkpoints, source]:
        assert store.check(manifest.id) == []
    for digest in version.blobs:
        assert store.storage.exists(keys.blob_key(digest))
    report = store.verify()
    assert report.sound and not report.damaged_models, report.lines()
    assert a_outputs.id not in {m.id for m in store.list(role=None)}


def test_verify_names_a_blob_missing_from_an_outputs_record(tmp_path):
    store = open_store("file://" + str(tmp_path / "store"))
    checkpoints, outputs = _trainer_run(store, tmp_path / "live")
    for manifest in checkpoints:
        store.delete(manifest.id)
    assert store.verify().sound
    entry = next(e for e in outputs.files if e.path.endswith("optimizer.pt"))
    path = tmp_path / "store" / keys.blob_key(entry.hash)
    os.chmod(path, 0o600)
    path.unlink()  # by hand, as no deletion of nodus would

    report = open_store(store.url).verify()
    assert not report.sound
    assert list(report.damaged) == [outputs.id]
    assert report.damaged[outputs.id] == [f"{entry.path}: blob {entry.hash} is missing"]


def test_verify_names_a_blob_missing_from_a_model_version(tmp_path):
    store = open_store("file://" + str(tmp_path / "store"))
    checkpoints, outputs = _trainer_run(store, tmp_path / "live", steps=(10,))
    weights = tuple(e for e in checkpoints[0].files if e.kind == "weights")
    store.add_model_version(
        ModelVersion("tiny", 1, "r", checkpoints[0].id, "main", 10, None, "manual", 1.0, weights)
    )
    for manifest in [*checkpoints, outputs]:
        store.delete(manifest.id)  # the version keeps the weights' blobs
    assert open_store(store.url).verify().sound
    model = next(e for e in weights if e.path.endswith("model.safetensors"))
    assert store.list(role=None) == []  # only the version names its blobs
    path = tmp_path / "store" / keys.blob_key(model.hash)
    os.chmod(path, 0o600)
    path.unlink()

    report = open_store(store.url).verify()
    assert not report.sound and not report.damaged
    assert report.damaged_models == {"tiny:1": [f"{model.path}: blob {model.hash} is missing"]}
    assert "damaged model version tiny:1:" in report.lines()
    assert not open_store(store.url).verify(repair=True).sound  # no repair invents weights


# --- random interleavings ----------------------------------------------------------------------

NAMES = ("model.safetensors", "optimizer.pt", "trainer_state.json", "config.json", "notes.txt")
PATHS = [f"state/checkpoint-{n}/{name}" for n in (1, 2) for name in NAMES]
LABELS = [f"c{n}" for n in range(6)]  # few contents over many paths: blobs are shared widely
INTERLEAVINGS = 60
OPS_EACH = 30


def _interleave(store, live: Path, rng: random.Random, log: list[str]) -> None:
    """One random step: a capture (any role) of overlapping files, a deletion of any kind, gc,
    a model version registered or deleted."""
    live_ids = [m.id for m in store.list(role=None)]
    checkpoints = [m for m in store.list(role="checkpoint")]
    what = rng.random()
    if what < 0.45 or not live_ids:
        files = {p: content(rng.choice(LABELS)) for p in rng.sample(PATHS, rng.randint(1, 6))}
        shutil.rmtree(live, ignore_errors=True)
        write_tree(live, files)
        role = rng.choice(["checkpoint", "checkpoint", "outputs", "source"])
        step = rng.randint(0, 99) if role == "checkpoint" else None
        info = SnapshotInfo(rng.choice(["ra", "rb"]), "main", 1, step, role=role)
        made = store.capture(str(live), ["state"], info=info)
        log.append(f"capture {role} {made.id} {sorted(files)}")
    elif what < 0.65 and checkpoints:
        manifest = rng.choice(checkpoints)
        kind = rng.choice(manifest.kinds)
        store.delete_kind(manifest.id, kind)
        log.append(f"rotate {kind} of {manifest.id}")
    elif what < 0.75:
        snapshot_id = rng.choice(live_ids)
        store.delete(snapshot_id, reason=rng.choice(["expiry", "run deleted"]))
        log.append(f"delete {snapshot_id}")
    elif what < 0.85 and checkpoints:
        manifest = rng.choice(checkpoints)
        weights = tuple(e for e in manifest.held_files() if e.kind == "weights")
        number = len(store.model_records.list()) + 1 + rng.randint(0, 1000)
        if weights and store.model_records.read("m", number) is None:
            version = ModelVersion("m", number, manifest.run, manifest.id, "main", manifest.step,
                                   None, "manual", 1.0, weights)  # fmt: skip
            try:
                store.add_model_version(version)
                log.append(f"model m:{number} of {manifest.id}")
            except NotFoundError:
                pass
    elif what < 0.9 and store.model_records.list():
        version = rng.choice(store.model_records.list())
        store.delete_model_version(version.name, version.version)
        log.append(f"unregister m:{version.version}")
    elif what < 0.95:
        store.finish_deletions()
        log.append("finish")
    else:
        store.gc_blobs(grace_s=0.0)
        log.append("gc")


def _every_live_record_restores(store, scratch: Path) -> list[str]:
    problems = []
    for manifest in store.list(role=None):
        problems += [f"{manifest.role} {manifest.id}: {p}" for p in store.check(manifest.id)]
    for version in store.model_records.list():
        for digest in version.blobs:
            if not store.storage.exists(keys.blob_key(digest)):
                problems.append(f"model m:{version.version}: blob {digest} is missing")
    return problems


@pytest.fixture
def fast_folder(tmp_path):
    """A tmpfs folder where there is one: this looks for lost blobs, not for durability."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="nodus-keep-", dir="/dev/shm"))
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                os.chmod(path, 0o755)
        shutil.rmtree(folder)


@pytest.mark.slow  # sixty stores, thirty steps each
def test_random_interleavings_never_free_a_blob_a_live_record_names(fast_folder):
    failures = []
    for seed in range(INTERLEAVINGS):
        rng = random.Random(seed)
        root = fast_folder / str(seed)
        store = open_store("file://" + str(root / "store"))
        log: list[str] = []
        for _ in range(OPS_EACH):
            _interleave(store, root / "live", rng, log)
            problems = _every_live_record_restores(store, root / "scratch")
            if problems:
                failures.append(f"seed {seed} after {log}: {problems}")
                break
        else:
            store.finish_deletions()
            store.gc_blobs(grace_s=0.0)
            held = {e.hash for m in store.list(role=None) for e in m.held_files() if e.hash}
            held |= {d for v in store.model_records.list() for d in v.blobs}
            on_disk = {keys.hash_of_blob_key(i.key) for i in store.storage.list(keys.BLOBS)}
            if on_disk != held:
                failures.append(f"seed {seed}: blobs {on_disk ^ held} left or lost")
            for manifest in store.list(role=None):  # byte for byte, as a user gets them
                target = root / "restored" / manifest.id
                store.restore(manifest.id, str(target))
            if not store.verify().sound:
                failures.append(f"seed {seed}: verify: {store.verify().lines()}")
        if not failures:
            shutil.rmtree(root, ignore_errors=True)
    assert not failures, "\n".join(failures[:5])


# --- a capture or an upload that outlasts the intent's lease -----------------------------------

LEASE_S = 1.5  # the intent's lease, shortened so that outlasting it takes a moment


def _deleting_while(store, snapshot_id: str, kinds, leases: float = 2.0) -> list:
    """Delete ``kinds`` of ``snapshot_id`` again and again for ``leases`` intent leases, as
    rotation passes and gc processes would while a long capture or upload runs; the reports."""
    reports = []
    started = time.monotonic()
    while time.monotonic() - started < leases * LEASE_S:
        for kind in kinds:
            try:
                reports.append(store.delete_kind(snapshot_id, kind))
            except NotFoundError:  # deleted whole: the deletion was not held off
                return [*reports, None]
    return reports


@pytest.mark.slow  # waits out a lease of 1.5 s
def test_a_capture_outlasting_the_intent_lease_keeps_the_blobs_it_names(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "CAPTURE_LEASE_S", LEASE_S)
    store = open_store("file://" + str(tmp_path / "store"))
    live = tmp_path / "live"
    write_tree(live, _checkpoint_files(10))
    checkpoint = store.capture(str(live), ["state"], info=SnapshotInfo("r", "main", 1, 10))
    other = open_store(store.url)  # rotation's own store object, as in the runner
    reports: list = []

    def slow_end() -> None:  # the capture's last moment before its commit: a long one
        reports.extend(_deleting_while(other, checkpoint.id, checkpoint.stored_kinds))

    info = SnapshotInfo("r", "main", 1, None, role="outputs")
    outputs = store.capture(str(live), ["state"], info=info, guard=slow_end)
    _restores_whole(store, outputs, tmp_path / "restored", read_tree(live))
    assert reports and all(report and report.deferred for report in reports)
    other.finish_deletions()
    assert other.list(role="checkpoint") == []
    _restores_whole(store, outputs, tmp_path / "after", read_tree(live))


@pytest.mark.slow  # waits out a lease of 1.5 s
def test_an_upload_outlasting_the_intent_lease_keeps_the_blobs_it_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "CAPTURE_LEASE_S", LEASE_S)
    remote = open_store("file://" + str(tmp_path / "remote"))
    staging = open_store("file://" + str(tmp_path / "staging"))
    live = tmp_path / "live"
    write_tree(live, _checkpoint_files(10))
    # The checkpoint is on the remote store already; the outputs, staged, share all its files.
    checkpoint = remote.capture(str(live), ["state"], info=SnapshotInfo("r", "main", 1, 10))
    info = SnapshotInfo("r", "main", 1, None, role="outputs")
    staged = staging.capture(str(live), ["state"], info=info)
    reports: list = []

    def slow_end() -> None:  # the upload's last moment before its remote commit
        reports.extend(_deleting_while(remote, checkpoint.id, checkpoint.stored_kinds))

    uploader = Uploader(staging, remote, guard=slow_end)
    uploader.submit(staged, keep=True)
    assert uploader.finish(retry_s=0.0) == []
    _restores_whole(remote, remote.get(staged.id), tmp_path / "restored", read_tree(live))
    assert reports and all(report and report.deferred for report in reports)


def _out_of_reach(store) -> Path:
    """The running capture's intent can no more be renewed (its key is a folder now, holding
    the record as it was last written, which sweeps still read until it expires), as when the
    store cannot be reached; the intent's path, to put it back."""
    (intent,) = Path(store.storage.path(keys.INTENTS)).iterdir()
    record = intent.read_bytes()
    intent.unlink()
    intent.mkdir()
    (intent / "as-written").write_bytes(record)
    return intent


def _reachable(intent: Path) -> None:
    shutil.rmtree(intent)  # the next renewal writes it again


@pytest.mark.slow  # waits out a lease of 1.5 s
def test_a_capture_whose_intent_lapsed_commits_nothing_that_names_a_freed_blob(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(sweep, "CAPTURE_LEASE_S", LEASE_S)
    store = open_store("file://" + str(tmp_path / "store"))
    live = tmp_path / "live"
    write_tree(live, _checkpoint_files(10))
    checkpoint = store.capture(str(live), ["state"], info=SnapshotInfo("r", "main", 1, 10))
    other = open_store(store.url)
    reports: list = []

    def unreachable_end() -> None:  # renewals fail for longer than the lease meanwhile
        intent = _out_of_reach(store)
        reports.extend(_deleting_while(other, checkpoint.id, checkpoint.stored_kinds))
        _reachable(intent)

    info = SnapshotInfo("r", "main", 1, None, role="outputs")
    with pytest.raises(StoreError, match="could not renew its intent"):
        store.capture(str(live), ["state"], info=info, guard=unreachable_end)
    assert reports[0].deferred and reports[-1] is None  # held off until the intent expired
    assert store.list(role=None) == []  # and no snapshot names its freed blobs
    outputs = store.capture(str(live), ["state"], info=info)  # the next one stores them again
    _restores_whole(store, outputs, tmp_path / "restored", read_tree(live))


@pytest.mark.slow  # waits out a lease of 1.5 s
def test_an_upload_whose_intent_lapsed_sends_again_what_a_sweep_freed(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "CAPTURE_LEASE_S", LEASE_S)
    remote = open_store("file://" + str(tmp_path / "remote"))
    staging = open_store("file://" + str(tmp_path / "staging"))
    live = tmp_path / "live"
    write_tree(live, _checkpoint_files(10))
    checkpoint = remote.capture(str(live), ["state"], info=SnapshotInfo("r", "main", 1, 10))
    info = SnapshotInfo("r", "main", 1, None, role="outputs")
    staged = staging.capture(str(live), ["state"], info=info)
    reports: list = []

    def unreachable_end() -> None:
        intent = _out_of_reach(remote)
        reports.extend(_deleting_while(remote, checkpoint.id, checkpoint.stored_kinds))
        _reachable(intent)

    uploader = Uploader(staging, remote, guard=unreachable_end)
    uploader.submit(staged, keep=True)
    assert uploader.finish(retry_s=0.0) == []
    assert reports[0].deferred and reports[-1] is None  # the checkpoint went, blobs and all
    assert remote.list(role="checkpoint") == []
    _restores_whole(remote, remote.get(staged.id), tmp_path / "restored", read_tree(live))
