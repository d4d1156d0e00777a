"""Consistent capture of a live folder the program keeps changing (file:// store, real files)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

import nodus.store._io as io_module
import nodus.store.live_folder as capture_module
from nodus.errors import StaleAttemptError, StoreError
from nodus.store import SnapshotInfo, _direct, classify, keys, open_store

from .trees import read_tree, write_tree

INFO = SnapshotInfo(run="run_a", stage="train", attempt=1, step=1)


@pytest.fixture
def store(tmp_path):
    return open_store(str(tmp_path / "store"))  # a bare absolute path is a file:// store


def _age(root, seconds=10):
    """Make every file look written ``seconds`` ago (out of the racy window)."""
    for folder, _dirs, names in os.walk(root):
        for name in names:
            past = time.time() - seconds
            os.utime(os.path.join(folder, name), (past, past))


@pytest.fixture
def reads(monkeypatch):
    """Paths of the files capture actually read (the one pass that copies and hashes)."""
    seen = []
    real = capture_module.copy_hashing

    def spy(source, sink, **options):
        seen.append(os.readlink(f"/proc/self/fd/{source.fileno()}"))
        return real(source, sink, **options)

    monkeypatch.setattr(capture_module, "copy_hashing", spy)
    return seen


def test_unchanged_files_are_neither_reread_nor_restored(store, tmp_path, reads):
    live = tmp_path / "live"
    write_tree(live, {"state/a.bin": os.urandom(4000), "state/b.bin": os.urandom(4000)})
    _age(live)
    store.capture(str(live), ["state"], info=INFO)
    assert len(reads) == 2
    blobs_before = {(b.key, b.modified) for b in store.storage.list(keys.BLOBS)}

    reads.clear()
    again = store.capture(str(live), ["state"], info=INFO)
    assert reads == [] and store.check(again.id) == []
    assert {(b.key, b.modified) for b in store.storage.list(keys.BLOBS)} == blobs_before

    (live / "state/b.bin").write_bytes(os.urandom(4000))  # same size, new contents
    past = os.stat(live / "state/a.bin").st_mtime_ns
    os.utime(live / "state/b.bin", ns=(past, past))  # even with its old mtime: ctime tells
    store.capture(str(live), ["state"], info=INFO)
    assert reads == [str(live / "state/b.bin")]


def test_recently_written_file_is_read_again(store, tmp_path, reads):
    live = tmp_path / "live"
    write_tree(live, {"state/a.bin": b"fresh"})  # mtime is now: inside the racy window
    store.capture(str(live), ["state"], info=INFO)
    reads.clear()
    store.capture(str(live), ["state"], info=INFO)
    assert reads == [str(live / "state/a.bin")]


def test_file_modified_during_the_copy_is_read_again(store, tmp_path, monkeypatch):
    live = tmp_path / "live"
    target = live / "state/optimizer.pt"
    write_tree(live, {"state/optimizer.pt": b"A" * 100_000})
    _age(live)
    real = capture_module.copy_hashing
    calls = []

    def copy_then_program_writes(source, sink, **options):
        result = real(source, sink, **options)
        if not calls:  # the program rewrites the file in place while the first copy runs
            with open(target, "r+b") as handle:
                handle.write(b"B" * 100_000)
        calls.append(sink)
        return result

    monkeypatch.setattr(capture_module, "copy_hashing", copy_then_program_writes)
    made = store.capture(str(live), ["state"], info=INFO)
    assert len(calls) == 2
    store.restore(made.id, str(tmp_path / "r"))
    assert (tmp_path / "r/state/optimizer.pt").read_bytes() == b"B" * 100_000
    assert os.listdir(store.storage.path(keys.TMP)) == []  # the torn copy was discarded


WRITER = textwrap.dedent(
    """
    import os, sys, time
    root, size = sys.argv[1], int(sys.argv[2])
    for i in range(10**9):
        fill = b"AB"[i % 2:i % 2 + 1] * (size // 2)
        with open(os.path.join(root, "inplace.bin"), "r+b") as f:  # rewritten in place
            f.write(fill * 2)
        tmp = os.path.join(root, "replaced.tmp")
        with open(tmp, "wb") as f:
            f.write(fill * 2)
        os.replace(tmp, os.path.join(root, "replaced.bin"))
        time.sleep(0.04)  # a busy program: a rewrite every few tens of milliseconds
    """
)


@pytest.fixture(params=["page-cache", "direct"])
def copy_path(request, monkeypatch):
    """Capture through the kernel copy, or (files of 64 KiB and up) the direct-write pipeline."""
    used = []
    if request.param == "direct":
        monkeypatch.setattr(io_module, "STORE_DIRECT_MIN_BYTES", 64 * 1024)
        monkeypatch.setattr(_direct, "STORE_DIRECT_CHUNK_BYTES", 64 * 1024)
        real = io_module.direct_copy

        def counting(*args, **kwargs):
            result = real(*args, **kwargs)
            used.append(result)
            return result

        monkeypatch.setattr(io_module, "direct_copy", counting)
    yield request.param
    assert bool(used) == (request.param == "direct"), "the copy path under test was not taken"


@pytest.mark.slow  # 25 captures racing a real writer process
def test_capture_of_a_folder_being_rewritten_holds_one_real_state_of_each_file(
    store, tmp_path, copy_path
):
    live = tmp_path / "live"
    size = 512 * 1024
    write_tree(live, {"state/inplace.bin": b"A" * size, "state/replaced.bin": b"A" * size})
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(live / "state"), str(size)])
    made = []
    try:
        for _ in range(25):
            try:
                made.append(store.capture(str(live), ["state"], info=INFO))
            except StoreError as error:
                # On a starved machine a read may never fit between two rewrites: then the
                # capture gives up and commits nothing, which is allowed; a torn copy is not.
                assert "kept changing while it was captured" in str(error)
    finally:
        writer.kill()
        writer.wait()
    assert len(made) >= 5, f"only {len(made)} of 25 captures of a busy folder committed"
    assert {m.id for m in store.list(run=INFO.run)} == {m.id for m in made}
    for index, manifest in enumerate(made):
        target = tmp_path / f"r{index}"
        store.restore(manifest.id, str(target))
        for data in read_tree(target).values():
            assert data in (b"A" * size, b"B" * size), "a torn copy was committed"


def test_truncating_a_file_in_place_cannot_touch_an_earlier_snapshot(store, tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"state/model.safetensors": b"W" * 10_000})
    made = store.capture(str(live), ["state"], info=INFO)
    with open(live / "state/model.safetensors", "r+b") as handle:
        handle.truncate(0)
        handle.write(b"X")
    store.restore(made.id, str(tmp_path / "r"))
    assert (tmp_path / "r/state/model.safetensors").read_bytes() == b"W" * 10_000


def test_symlinks_are_kept_inside_the_selection_and_refused_outside(store, tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"state/ckpt-1/w.bin": b"w", "secret.txt": b"s", ".nodus/c.json": b"{}"})
    os.symlink("ckpt-1", live / "state/latest")  # a folder: kept as a link, not followed
    os.symlink("../secret.txt", live / "state/up")  # outside the selection
    os.symlink(str(live / "state/ckpt-1/w.bin"), live / "state/abs")  # absolute
    os.symlink("../.nodus/c.json", live / "state/private")  # into the private folder
    events = []
    made = store.capture(
        str(live), ["state"], info=INFO, on_event=lambda t, d: events.append((t, d["path"]))
    )
    assert sorted((f.path, f.target) for f in made.files) == [
        ("state/ckpt-1/w.bin", None),
        ("state/latest", "ckpt-1"),
    ]
    assert sorted(events) == [
        ("capture_symlink_refused", p) for p in ("state/abs", "state/private", "state/up")
    ]
    store.restore(made.id, str(tmp_path / "r"))
    assert (tmp_path / "r/state/latest/w.bin").read_bytes() == b"w"


def test_stale_attempt_commits_nothing(store, tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"state/a.bin": b"a"})

    def fenced():
        raise StaleAttemptError("attempt 1 was superseded by attempt 2")

    with pytest.raises(StaleAttemptError):
        store.capture(str(live), ["state"], info=INFO, guard=fenced)
    assert store.list() == [] and store.storage.list(keys.INTENTS) == []
    assert store.gc_blobs(grace_s=0).deleted_blobs == 1  # its blob is garbage, not a snapshot


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("checkpoint-5/model.safetensors", "weights"),
        ("checkpoint-5/model-00001-of-00003.safetensors", "weights"),
        ("out/adapter_model.safetensors", "weights"),
        ("checkpoint-5/pytorch_model.bin", "weights"),
        ("checkpoint-5/config.json", "weights"),
        ("checkpoint-5/generation_config.json", "weights"),
        ("tok/tokenizer_config.json", "weights"),
        ("tok/vocab.txt", "weights"),
        ("tok/merges.txt", "weights"),
        ("tok/chat_template.jinja", "weights"),
        ("checkpoint-5/optimizer.pt", "state"),
        ("checkpoint-5/scheduler.pt", "state"),
        ("checkpoint-5/scaler.pt", "state"),
        ("checkpoint-5/rng_state_0.pth", "state"),
        ("checkpoint-5/trainer_state.json", "state"),
        ("checkpoint-5/training_args.bin", "state"),
        ("checkpoint-5/data_position.json", "state"),
        ("checkpoint-5/weights.npz", "files"),
        ("state/step.txt", "files"),
        ("state/my_config.json", "files"),
    ],
)
def test_artifact_kinds(path, kind):
    assert classify(path) == kind


def test_a_fresh_store_object_copies_nothing_the_store_already_holds(tmp_path, monkeypatch):
    """A run's source, captured by every `nodus run` with a store object of its own: an
    unchanged folder is read and hashed, but no file is copied towards the store again."""
    live = tmp_path / "live"
    write_tree(live, {f"pkg/module_{n}.py": f"VALUE = {n}\n".encode() for n in range(20)})
    _age(live)
    source = SnapshotInfo(run="run_a", stage=None, attempt=0, step=None, role="source")
    open_store(str(tmp_path / "store")).capture(str(live), ["."], info=source)
    blobs_before = {
        (b.key, b.modified) for b in open_store(str(tmp_path / "store")).storage.list(keys.BLOBS)
    }

    again = open_store(str(tmp_path / "store"))
    spooled = []
    real = again.storage.spool_path
    monkeypatch.setattr(again.storage, "spool_path", lambda: spooled.append(1) or real())
    made = again.capture(str(live), ["."], info=source)
    assert spooled == [] and len(made.files) == 20 and again.check(made.id) == []
    assert {(b.key, b.modified) for b in again.storage.list(keys.BLOBS)} == blobs_before

    (live / "pkg/module_3.py").write_text("VALUE = 'changed'\n")
    changed = open_store(str(tmp_path / "store"))
    monkeypatch.setattr(changed.storage, "spool_path", lambda: spooled.append(1) or real())
    made = changed.capture(str(live), ["."], info=source)
    assert len(spooled) == 1 and changed.check(made.id) == []  # only the new content is stored
