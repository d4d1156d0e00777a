"""The capture loop against a real store and catalog: fencing, failures, save records, events,
and folders written in place (committed only whole, captured again when rewritten)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from nodus.errors import StaleAttemptError
from nodus.runner.capture.capturer import Capturer
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.workspace.layout import Workspace
from nodus.schemas.resolved import ResolvedContinuity, ResolvedExecution, ResolvedStage
from nodus.store import keys, restorable
from whole_files import read_whole, write_whole


def stage(paths=("state", "progress.json"), integration=None) -> ResolvedStage:
    return ResolvedStage(
        name="main",
        command=("true",),
        code="/",
        env={},
        outputs=(),
        integration=integration,
        continuity=ResolvedContinuity("checkpointed", True, tuple(paths)),
        execution=ResolvedExecution(50, False, 1, 3, 10, 5.0, 7),
    )


def contract(paths, **continuity) -> ResolvedStage:
    """A directory-contract stage whose selection is ``paths``, with ``continuity``'s keys."""
    marked = ResolvedContinuity("checkpointed", True, tuple(paths), **continuity)
    return dataclasses.replace(stage(), continuity=marked)


def capturer(setup, **kwargs) -> Capturer:
    """A capture loop of a new attempt; ``store`` (default: the real one) it commits into."""
    catalog, run_id, store, ws = setup
    number = catalog.start_attempt(run_id, "main")
    into = kwargs.get("store", store)
    context = AttemptContext(into, catalog, run_id, kwargs.get("stage", stage()), number)
    return Capturer(context, ws)


def checkpoint(ws: Workspace, step: int) -> None:
    folder = os.path.join(ws.state, f"checkpoint-{step}")
    os.makedirs(folder)
    with open(os.path.join(folder, "state.json"), "w") as handle:
        json.dump({"step": step}, handle)


def progress(ws: Workspace) -> None:
    """The selected file outside state/ (the stage's ``progress.json``)."""
    with open(os.path.join(ws.copy, "progress.json"), "w") as handle:
        handle.write("{}")


def test_a_snapshot_holds_its_own_checkpoint_folder_and_the_other_selected_paths(setup):
    _catalog, _run_id, store, ws = setup
    checkpoint(ws, 10)
    checkpoint(ws, 20)
    progress(ws)
    with open(os.path.join(ws.copy, "unselected.txt"), "w") as handle:
        handle.write("x")
    snapshot = capturer(setup).capture(20, reason="settled")
    paths = sorted(entry.path for entry in store.get(snapshot).files)
    assert paths == ["progress.json", "state/checkpoint-20/state.json"]
    committed = json.loads(Path(ws.private, "committed.json").read_text())
    assert committed == {"step": 20, "snapshot": snapshot}


@pytest.mark.parametrize("paths", [("state", "progress.json"), (".",), ("./state/",)])
def test_the_state_folder_is_narrowed_to_the_step_and_keeps_all_else_in_it(setup, paths):
    """However the selection names ``state/``: the step's folder and the rest of state/, never
    another checkpoint folder; a non-numbered ``checkpoint-best`` is the program's own file."""
    _catalog, _run_id, store, ws = setup
    for step in (10, 20, 30):
        checkpoint(ws, step)
    os.makedirs(os.path.join(ws.state, "checkpoint-best"))
    for name in ("checkpoint-best/weights.bin", "notes.txt"):
        with open(os.path.join(ws.state, name), "w") as handle:
            handle.write(name)
    progress(ws)
    capture = capturer(setup, stage=stage(paths))
    snapshot = capture.capture(20, reason="settled")
    files = sorted(entry.path for entry in store.get(snapshot).files)
    kept = ["state/checkpoint-20/state.json", "state/checkpoint-best/weights.bin"]
    whole = ["progress.json", *kept, "state/notes.txt"]
    assert files == (whole if paths != ("./state/",) else whole[1:])
    assert capture.capture(20, reason="exit") == snapshot  # the same selection: no new one


def test_a_selected_path_inside_another_steps_folder_is_left_out(setup):
    _catalog, _run_id, store, ws = setup
    checkpoint(ws, 10)
    checkpoint(ws, 20)
    progress(ws)
    capture = capturer(setup, stage=stage(("state/checkpoint-10", "progress.json")))
    snapshot = capture.capture(20, reason="settled")
    assert [entry.path for entry in store.get(snapshot).files] == ["progress.json"]


def test_a_state_folder_linked_outside_the_copy_is_never_followed(setup, tmp_path):
    catalog, run_id, store, ws = setup
    os.rmdir(ws.state)
    os.makedirs(tmp_path / "elsewhere" / "checkpoint-10")
    (tmp_path / "elsewhere" / "checkpoint-10" / "secret.txt").write_text("not the run's")
    os.symlink(tmp_path / "elsewhere", ws.state)
    snapshot = capturer(setup).capture(10, reason="save")
    assert [entry.path for entry in store.get(snapshot).files] == []
    assert "capture_symlink_refused" in [event["type"] for event in catalog.events(run_id)]


def test_a_stale_attempt_can_never_commit(setup):
    catalog, run_id, store, ws = setup
    stale = capturer(setup)
    catalog.start_attempt(run_id, "main")  # a newer attempt now owns the stage
    checkpoint(ws, 10)
    with pytest.raises(StaleAttemptError, match="superseded by attempt 2"):
        stale.capture(10, reason="settled")
    assert store.list(run=run_id) == []


def test_a_failed_capture_is_recorded_and_the_next_one_commits(setup, tmp_path):
    catalog, run_id, store, ws = setup
    capture = capturer(setup)
    checkpoint(ws, 10)
    blobs = tmp_path / "store" / "blobs"
    if blobs.exists():
        os.rename(blobs, tmp_path / "blobs-aside")
    blobs.write_text("the store cannot write here")  # like an unreachable or full store
    assert capture.capture(10, reason="settled") is None
    failed = [e for e in catalog.events(run_id) if e["type"] == "capture_failed"]
    assert failed and failed[0]["details"]["step"] == 10
    assert store.list(run=run_id) == []
    blobs.unlink()
    checkpoint(ws, 20)
    assert capture.capture(20, reason="settled") is not None
    assert [m.step for m in store.list(run=run_id)] == [20]


def test_save_records_are_captured_with_their_metrics_and_answer_requests(setup):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(paths=("state",), integration="hf-trainer-v1"))
    checkpoint(ws, 40)
    record = {
        "step": 40,
        "epoch": 1.25,
        "checkpoint": "checkpoint-40",
        "requests": [3],
        "metrics": {"loss": 2.1, "epoch": 1.25},
    }
    with open(os.path.join(ws.private, "saves", "40.json"), "w") as handle:
        json.dump(record, handle)
    with open(os.path.join(ws.private, "events", "1.json"), "w") as handle:
        json.dump({"type": "integration_note", "details": {"why": "testing"}}, handle)
    capture.tick()
    manifest = store.list(run=run_id)[-1]
    assert (manifest.step, manifest.epoch, manifest.metrics["loss"]) == (40, 1.25, 2.1)
    assert capture.answered == {3}
    notes = [e for e in catalog.events(run_id) if e["type"] == "integration_note"]
    assert notes[0]["details"] == {"why": "testing"} and notes[0]["attempt"] == 1
    assert os.listdir(os.path.join(ws.private, "events")) == []
    capture.tick()  # a record is captured once
    assert len(store.list(run=run_id)) == 1


def test_an_unchanged_selection_is_not_captured_twice(setup):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup)
    checkpoint(ws, 10)
    assert capture.capture(10, reason="settled")
    capture.final_capture()
    assert len(store.list(run=run_id)) == 1


def test_a_rewritten_save_record_answers_its_new_requests_without_a_second_snapshot(setup):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(paths=("state",), integration="hf-trainer-v1"))
    checkpoint(ws, 24)
    path = os.path.join(ws.private, "saves", "24.json")
    with open(path, "w") as handle:
        json.dump({"step": 24, "requests": []}, handle)
    capture.tick()
    with open(path + ".tmp", "w") as handle:  # the integration answers a stop at that step
        json.dump({"step": 24, "requests": [7]}, handle)
    os.replace(path + ".tmp", path)
    capture.tick()
    assert capture.answered == {7}
    assert [m.step for m in store.list(run=run_id)] == [24]


def test_a_checkpoint_folder_gone_before_its_capture_is_skipped(setup):
    catalog, run_id, store, _ws = setup
    assert capturer(setup).capture(30, reason="settled") is None  # pruned by the program
    assert store.list(run=run_id) == []
    assert "capture_skipped" in [e["type"] for e in catalog.events(run_id)]


class _PruningStore:
    """The real store, with the program pruning the folder while the capture copies it."""

    def __init__(self, store, folder):
        self.store, self.folder = store, folder

    def capture(self, *args, **kwargs):
        os.remove(os.path.join(self.folder, "state.json"))
        return self.store.capture(*args, **kwargs)


def test_a_checkpoint_folder_removed_during_its_capture_is_never_committed(setup):
    catalog, run_id, store, ws = setup
    checkpoint(ws, 30)
    capture = capturer(setup, store=_PruningStore(store, os.path.join(ws.state, "checkpoint-30")))
    assert capture.capture(30, reason="settled") is None
    assert store.list(run=run_id) == []  # no snapshot at step 30 missing its files
    skipped = [e for e in catalog.events(run_id) if e["type"] == "capture_skipped"]
    assert skipped and "changed" in skipped[0]["details"]["reason"]


class _PublishingStore:
    """The real store, with the program publishing a newer checkpoint as the capture starts."""

    def __init__(self, store, ws, step):
        self.store, self.ws, self.step = store, ws, step

    def capture(self, *args, **kwargs):
        if self.step is not None:
            checkpoint(self.ws, self.step)
            self.step = None
        return self.store.capture(*args, **kwargs)


def test_a_checkpoint_published_during_a_capture_never_joins_that_snapshot(setup):
    _catalog, run_id, store, ws = setup
    checkpoint(ws, 10)
    capture = capturer(setup, store=_PublishingStore(store, ws, 20))
    snapshot = capture.capture(10, reason="settled")
    # one generation of state per snapshot: step 20 was not listed when step 10 was selected
    assert sorted(e.path for e in store.get(snapshot).files) == ["state/checkpoint-10/state.json"]
    assert [m.step for m in store.list(run=run_id)] == [10]


def test_a_restored_attempt_that_saves_nothing_commits_nothing(setup):
    catalog, run_id, store, ws = setup
    checkpoint(ws, 10)
    first = capturer(setup).capture(10, reason="settled")
    number = catalog.start_attempt(run_id, "main")
    restored = Capturer(
        AttemptContext(store, catalog, run_id, stage(), number),
        ws,
        restored_step=10,
        restored_snapshot=first,
    )
    restored.final_capture()
    assert [m.id for m in store.list(run=run_id)] == [first]


# --- folders written in place: only whole ones are committed, a rewrite is captured again ----


def trainer_checkpoint(ws: Workspace, step: int, version: str, last: bool = True) -> str:
    """A Trainer-layout folder written in place; without ``last`` its state is not written yet."""
    folder = os.path.join(ws.state, f"checkpoint-{step}")
    os.makedirs(folder, exist_ok=True)
    names = ["model.safetensors", "optimizer.pt", "rng_state.pth"]
    for name in names + (["trainer_state.json"] if last else []):
        write_whole(os.path.join(folder, name), f"{name} {version}")
    return folder


def settle(capture: Capturer) -> None:
    """Two polls with NODUS_SETTLE_S=0: the first sees the folder's form, the second settles it."""
    capture.tick()
    capture.tick()


@pytest.fixture
def no_settling(monkeypatch):
    monkeypatch.setenv("NODUS_SETTLE_S", "0")


def test_a_settled_folder_without_its_last_file_is_not_committed_until_it_has_it(
    setup, no_settling
):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(paths=("state",)))
    trainer_checkpoint(ws, 10, "v1", last=False)
    settle(capture)
    assert store.list(run=run_id) == []
    incomplete = [e for e in catalog.events(run_id) if e["type"] == "checkpoint_incomplete"]
    assert incomplete[0]["details"]["step"] == 10
    assert "trainer_state.json" in incomplete[0]["details"]["missing"]
    assert "checkpoint_complete" in incomplete[0]["details"]["hint"]
    trainer_checkpoint(ws, 10, "v1")
    settle(capture)
    (manifest,) = store.list(run=run_id)
    assert {e.path.rsplit("/", 1)[1] for e in manifest.files} == {
        "model.safetensors",
        "optimizer.pt",
        "rng_state.pth",
        "trainer_state.json",
    }


def test_a_folder_rewritten_after_its_capture_is_captured_again_and_the_newer_is_restored(
    setup, no_settling, tmp_path
):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(paths=("state",)))
    trainer_checkpoint(ws, 10, "v1")
    settle(capture)
    (first,) = store.list(run=run_id)
    trainer_checkpoint(ws, 10, "v2, rewritten", last=False)  # new weights next to the old state
    settle(capture)
    assert store.list(run=run_id) == [first]  # a mix of two saves is never taken
    trainer_checkpoint(ws, 10, "v2, rewritten")
    settle(capture)
    older, newer = store.list(run=run_id)
    assert (older.step, newer.step) == (10, 10) and older.id == first.id
    assert [m.id for m in restorable.newest_first([older, newer])] == [newer.id, older.id]
    assert [m.id for m in restorable.current([older, newer])] == [newer.id]  # one row listed
    target = tmp_path / "restored"
    store.restore(restorable.newest_first(store.list(run=run_id))[0].id, str(target))
    restored = target / "state" / "checkpoint-10"
    assert read_whole(str(restored / "model.safetensors")) == "model.safetensors v2, rewritten"
    assert (restored / "trainer_state.json").read_text() == "trainer_state.json v2, rewritten"


def test_the_exit_capture_leaves_out_a_folder_the_program_left_half_written(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(paths=("state",)))
    trainer_checkpoint(ws, 10, "v1")
    settle(capture)
    trainer_checkpoint(ws, 20, "v1", last=False)  # killed in the middle of this save
    capture.final_capture()
    assert [m.step for m in store.list(run=run_id)] == [10]
    exits = [e for e in catalog.events(run_id) if e["type"] == "checkpoint_incomplete"]
    assert [(e["details"]["step"], e["details"]["reason"]) for e in exits] == [(20, "exit")]


def test_with_no_whole_folder_the_exit_capture_commits_nothing(setup):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(paths=("state", "progress.json")))
    progress(ws)
    trainer_checkpoint(ws, 10, "v1", last=False)  # killed in the middle of its first save
    capture.final_capture()
    assert store.list(run=run_id) == []


def test_the_checkpoint_complete_marker_decides_for_a_layout_of_its_own(setup, no_settling):
    _catalog, run_id, store, ws = setup
    marked = ResolvedContinuity("checkpointed", True, ("state",), checkpoint_complete="DONE")
    capture = capturer(setup, stage=dataclasses.replace(stage(), continuity=marked))
    folder = os.path.join(ws.state, "checkpoint-10")
    os.makedirs(folder)
    for name in ("model.safetensors", "progress.json"):  # no trainer_state.json in this layout
        write_whole(os.path.join(folder, name), name)
    settle(capture)
    assert store.list(run=run_id) == []
    with open(os.path.join(folder, "DONE"), "w") as handle:
        handle.write("")
    settle(capture)
    assert [m.step for m in store.list(run=run_id)] == [10]


def test_an_integration_save_is_committed_whatever_the_marker(setup):
    _catalog, run_id, store, ws = setup
    marked = ResolvedContinuity("checkpointed", True, ("state",), checkpoint_complete="DONE")
    prepared = dataclasses.replace(stage(integration="auto"), continuity=marked)
    capture = capturer(setup, stage=prepared)
    trainer_checkpoint(ws, 40, "v1")
    with open(os.path.join(ws.private, "saves", "40.json"), "w") as handle:
        json.dump({"step": 40, "requests": []}, handle)
    capture.tick()  # the integration publishes whole folders: no marker is written or needed
    capture.final_capture()
    assert [m.step for m in store.list(run=run_id)] == [40]


def _inode(path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_ino, info.st_dev


def test_an_integration_save_is_stored_by_links_and_the_rest_of_the_selection_by_copies(setup):
    """One write per save: the published folder's files become the blobs themselves (read-only
    from then on); a file the program may still rewrite in place is copied."""
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=stage(integration="hf-trainer-v1"))
    checkpoint(ws, 40)
    with open(os.path.join(ws.copy, "progress.json"), "w") as handle:
        handle.write('{"live": true}')
    with open(os.path.join(ws.private, "saves", "40.json"), "w") as handle:
        json.dump({"step": 40, "requests": []}, handle)
    capture.tick()

    (made,) = store.list(run=run_id)
    entries = {entry.path: entry for entry in made.files}
    saved = os.path.join(ws.state, "checkpoint-40", "state.json")
    blob = store.storage.path(keys.blob_key(entries["state/checkpoint-40/state.json"].hash))
    assert _inode(blob) == _inode(saved)
    assert not os.access(saved, os.W_OK) or os.geteuid() == 0  # read-only for everyone else
    progress = store.storage.path(keys.blob_key(entries["progress.json"].hash))
    assert _inode(progress) != _inode(os.path.join(ws.copy, "progress.json"))
    assert store.check(made.id) == []

    # The program prunes its folder as it does after the commit: the snapshot keeps its blob.
    shutil.rmtree(os.path.join(ws.state, "checkpoint-40"))
    store.restore(made.id, os.path.join(ws.root, "restored"))
    with open(os.path.join(ws.root, "restored", "state", "checkpoint-40", "state.json")) as f:
        assert json.load(f) == {"step": 40}


def test_a_directory_contract_folder_is_copied_never_linked(setup):
    """A program saving on its own may write into its folder again: its files stay its own."""
    _catalog, _run_id, store, ws = setup
    checkpoint(ws, 10)
    made = store.get(capturer(setup).capture(10, reason="save"))
    (entry,) = [e for e in made.files if e.path.startswith("state/")]
    saved = os.path.join(ws.state, "checkpoint-10", "state.json")
    assert _inode(store.storage.path(keys.blob_key(entry.hash))) != _inode(saved)
    assert os.access(saved, os.W_OK)
