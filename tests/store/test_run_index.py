"""The run index: a listing of one run reads that run's manifests, not the whole store's, and
answers exactly what reading every manifest answers, whatever state the index is in."""

from __future__ import annotations

import random

import pytest

from nodus.store import SnapshotInfo, keys, open_store, run_index
from nodus.store.upload import Uploader

from .trees import write_tree


def _capture(store, live, run, step, role="checkpoint"):
    write_tree(live, {f"state/{run}-{step}.bin": f"{run} at {step}".encode()})
    return store.capture(str(live), ["state"], info=SnapshotInfo(run, "main", 1, step, role=role))


def _manifest_reads(store, monkeypatch) -> list[str]:
    """The snapshot ids whose manifests ``store`` reads from its storage from now on."""
    storage, reads = store.storage, []
    real = storage.read

    def read(key: str) -> bytes:
        found = keys.snapshot_id_of_key(key)
        if found:
            reads.append(found)
        return real(key)

    monkeypatch.setattr(storage, "read", read)
    return reads


def _drop_entry(store, manifest) -> None:
    """As a store written before the index, or a crash between the manifest and its entry."""
    store.storage.delete(keys.index_key(manifest.id, manifest.run))


def test_a_fresh_listing_of_one_run_reads_its_manifests_and_the_unindexed_only(
    store_url, live, monkeypatch
):
    writer = open_store(store_url)
    made = {run: [_capture(writer, live, run, step) for step in (1, 2, 3)] for run in "abc"}
    legacy_a, legacy_b = made["a"][0], made["b"][0]
    _drop_entry(writer, legacy_a)
    _drop_entry(writer, legacy_b)
    reader = open_store(store_url)  # a fresh process's store: nothing read yet
    reads = _manifest_reads(reader, monkeypatch)
    assert [m.id for m in reader.list(run="a")] == [m.id for m in made["a"]]
    # b's and c's indexed manifests are left unread; b's unindexed one cannot be
    assert sorted(reads) == sorted([m.id for m in made["a"]] + [legacy_b.id])
    reads.clear()
    assert [m.id for m in reader.list(run="a")] == [m.id for m in made["a"]]
    assert reads == []  # what was read or skipped once is known


def test_a_deleted_snapshot_takes_its_entry_with_it(store_url, live):
    store = open_store(store_url)
    kept, gone = _capture(store, live, "r", 1), _capture(store, live, "r", 2)
    assert set(run_index.runs_by_snapshot(store.storage)) == {kept.id, gone.id}
    store.delete(gone.id)
    assert run_index.runs_by_snapshot(store.storage) == {kept.id: {"r"}}


def test_gc_indexes_what_has_no_entry_and_removes_entries_of_snapshots_gone(store_url, live):
    store = open_store(store_url)
    made = [_capture(store, live, run, step) for run in ("r", "s") for step in (1, 2)]
    made.append(_capture(store, live, "r", None, role="outputs"))
    for manifest in made[:3]:
        _drop_entry(store, manifest)  # committed before the index existed
    crashed = keys.index_key(keys.new_snapshot_id(), "r")  # left by a crash: no manifest
    store.storage.write(crashed, b"")
    store.finish_deletions()  # what `nodus gc` runs
    assert run_index.runs_by_snapshot(store.storage) == {m.id: {m.run} for m in made}


def test_an_upload_indexes_the_snapshot_on_the_remote_store(tmp_path, live):
    remote = open_store("file://" + str(tmp_path / "remote"))
    staging = open_store("file://" + str(tmp_path / "staging"))
    staged = _capture(staging, live, "r", 7)
    uploader = Uploader(staging, remote)
    uploader.submit(staged, keep=True)
    assert uploader.finish(retry_s=0.0) == []
    assert run_index.runs_by_snapshot(remote.storage) == {staged.id: {"r"}}
    assert [m.id for m in open_store(remote.url).list(run="r")] == [staged.id]


@pytest.mark.parametrize("seed", range(6))
def test_listings_agree_with_reading_every_manifest_whatever_the_index_holds(
    tmp_path, live, monkeypatch, seed
):
    """Entries missing, entries of snapshots gone, snapshots deleted and kinds retired: every
    listing by run (and stage and role) is what filtering every manifest gives."""
    rng = random.Random(seed)
    url = "file://" + str(tmp_path / "store")
    writer = open_store(url)
    runs = ["r1", "r2", "r3"]
    made = []
    for step in range(rng.randint(4, 9)):
        role = rng.choice(["checkpoint", "checkpoint", "outputs"])
        made.append(_capture(writer, live, rng.choice(runs), step, role))
    for manifest in made:
        if rng.random() < 0.3:
            _drop_entry(writer, manifest)
        elif rng.random() < 0.2:
            writer.delete(manifest.id)
    for _ in range(rng.randint(0, 3)):  # a crash's leftovers: entries naming no manifest
        writer.storage.write(keys.index_key(keys.new_snapshot_id(), rng.choice(runs)), b"")
    everything = open_store(url).list(role=None)
    reader = open_store(url)
    reads = _manifest_reads(reader, monkeypatch)
    for run in [*runs, "r9"]:
        for role in (None, "checkpoint", "outputs"):
            expected = [m.id for m in everything if m.run == run and role in (None, m.role)]
            assert [m.id for m in reader.list(run=run, role=role)] == expected
    assert sorted(reads) == sorted(m.id for m in everything)  # each read once, none in vain
    first = open_store(url)
    reads = _manifest_reads(first, monkeypatch)
    first.list(run="r9")  # a run with no snapshot reads only what the index cannot place
    unindexed = set(m.id for m in everything) - set(run_index.runs_by_snapshot(first.storage))
    assert set(reads) == unindexed
