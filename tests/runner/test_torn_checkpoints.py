"""No torn snapshot from any writer: format checks, the time rule, selections watched whole.

Real checkpoint files (``torch.save`` archives, safetensors, pickles) cut where a kill would
cut them; a real store and catalog; the capture loop driven by hand (``NODUS_SETTLE_S=0``: two
polls settle a form). The whole programs under real kills are in test_directory_programs.py.

The tests that write real torch or safetensors files import torch in their own process: they
are outside the quick tier (``slow``), which imports no ML stack.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import time

import pytest
from test_runner_capture import capturer, contract, stage

import doc_samples
from nodus.runner.recovery import suspects
from nodus.stages import formats, layouts, step_names
from nodus.stages.directory import capture_plan, restored_checkpoint, step_folders

# --- formats: a prefix of a checkpoint file is never whole -------------------------------------


def _torch_file(path, megabytes: float = 0.2) -> bytes:
    import torch

    torch.save({"w": torch.arange(int(megabytes * 262144), dtype=torch.float32), "s": 3}, path)
    return open(path, "rb").read()


def _cuts(data: bytes) -> list[int]:
    """Every length a kill could leave: the start, the middle, right before the end."""
    return sorted({1, 3, 4, 8, 64, len(data) // 3, len(data) // 2, len(data) - 22, len(data) - 1})


@pytest.mark.slow  # imports torch
@pytest.mark.parametrize("name", ["ckpt.pt", "model.bin", "epoch=0-step=5.ckpt", "rng.pth"])
def test_a_torch_archive_is_whole_only_with_its_central_directory(tmp_path, name):
    path = tmp_path / name
    data = _torch_file(path)
    assert formats.torn(str(path)) is None
    for cut in _cuts(data):
        path.write_bytes(data[:cut])
        assert formats.torn(str(path)) is not None, cut


@pytest.mark.slow  # imports torch
def test_a_big_torch_archive_with_zip64_records_is_whole(tmp_path):
    path = tmp_path / "big.pt"
    data = _torch_file(path, megabytes=8)
    assert formats.torn(str(path)) is None
    path.write_bytes(data[: len(data) - 100])
    assert "central directory" in formats.torn(str(path))


@pytest.mark.slow  # imports torch
def test_a_safetensors_file_is_whole_only_with_every_tensors_bytes(tmp_path):
    path = tmp_path / "model.safetensors"
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.ones(64, 64), "b": torch.zeros(8)}, str(path))
    data = path.read_bytes()
    assert formats.torn(str(path)) is None
    for cut in _cuts(data):
        path.write_bytes(data[:cut])
        assert formats.torn(str(path)) is not None, cut


def test_a_pickle_is_whole_only_when_it_ends_in_stop(tmp_path):
    path = tmp_path / "state.pkl"
    path.write_bytes(pickle.dumps({"step": 5, "values": list(range(50))}))
    assert formats.torn(str(path)) is None
    path.write_bytes(path.read_bytes()[:-1])
    assert "STOP" in formats.torn(str(path))


@pytest.mark.parametrize(
    "name", [".tmpsalMSo", "model.safetensors.tmp", "ckpt.pt.partial", "notes~", "x.tmp.42"]
)
def test_a_temporary_file_means_a_write_is_under_way(tmp_path, name):
    (tmp_path / name).write_bytes(b"whatever")
    assert formats.temporary(name) and formats.torn(str(tmp_path / name))


def test_files_of_other_formats_are_the_programs_own(tmp_path):
    for name, data in [("w.bin", b"\x00raw"), ("notes.txt", b""), ("progress.json", b"{")]:
        (tmp_path / name).write_bytes(data)
        assert formats.torn(str(tmp_path / name)) is None, name
    (tmp_path / "empty.pt").write_bytes(b"")
    assert formats.torn(str(tmp_path / "empty.pt")) == "empty"


# --- layouts: told apart by what they are -------------------------------------------------------


def test_a_plain_folder_with_an_optimizer_is_not_taken_for_a_trainers():
    assert layouts.judge(["model.pt", "optimizer.pt", "trainer.pt"]).complete
    assert layouts.judge(["optimizer.pt", "scheduler.pt"]).complete
    trainer = layouts.judge(["model.safetensors", "training_args.bin", "optimizer.pt"])
    assert not trainer.complete and "trainer_state.json" in trainer.missing


def test_an_empty_folder_is_never_whole():
    assert not layouts.judge([]).complete
    assert "empty" in layouts.judge([]).missing


def test_an_accelerate_folder_counts_its_registered_objects():
    base = ["model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"]
    assert layouts.judge(base).complete  # nothing registered as far as the run knows
    lacking = layouts.judge(base, custom=2)
    assert not lacking.complete and "custom_checkpoint_0.pkl" in lacking.missing
    one = layouts.judge([*base, "custom_checkpoint_0.pkl"], custom=2)
    assert not one.complete and "custom_checkpoint_1.pkl" in one.missing
    assert layouts.judge([*base, "custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl"], custom=2)
    gap = layouts.judge([*base, "custom_checkpoint_1.pkl"])
    assert not gap.complete and "custom_checkpoint_0.pkl" in gap.missing
    assert layouts.custom_objects([*base, "custom_checkpoint_0.pkl", "x/custom_checkpoint_1.pkl"])


def test_a_temporary_file_in_a_folder_makes_it_unfinished():
    verdict = layouts.judge([".tmpsalMSo"])
    assert not verdict.complete and ".tmpsalMSo" in verdict.missing


# --- step names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "paths, step, where",
    [
        (["state/step_5/a.bin", "state/step_20/model.safetensors"], 20, "state/step_20"),
        (["c/epoch=0-step=20.ckpt", "c/last.ckpt", "c/epoch=1-step=40.ckpt"], 40, None),
        (["state/checkpoints/checkpoint_3/x", "state/checkpoints/checkpoint_10/y"], 10, None),
        (["ds/global_step100/mp_rank_00_model_states.pt"], 100, "ds/global_step100"),
        (["iter_0000100/x"], 100, "iter_0000100"),
        (["ckpt.pt"], None, None),
        (["state/epoch_3/x", "state/mystep_3/x", "model-7.pt"], None, None),
    ],
)
def test_the_step_a_programs_names_carry(paths, step, where):
    found = step_names.step_of(paths)
    assert (found.step if found else None) == step
    if where is not None:
        assert found.path == where


def test_checkpoint_name_alone_decides_the_step():
    assert step_names.step_of(["m/model_12.pt", "m/step_99"], "model_{step}.pt").step == 12
    assert step_names.step_of(["e3-s40.bin"], "e{epoch}-s{step}.bin").step == 40
    assert step_names.step_of(["m/step_99"], "model_{step}.pt") is None


def test_the_restored_checkpoint_is_the_folder_or_file_that_carries_its_step():
    files = ["state/checkpoint-30/a", "state/checkpoint-30/b"]
    assert restored_checkpoint(files, 30, ("state",)) == "state/checkpoint-30"
    named = ["state/step_10/x", "state/step_20/x"]
    assert restored_checkpoint(named, 20, ("state",)) == "state/step_20"
    assert restored_checkpoint(["ckpt.pt"], 4, ("ckpt.pt",)) == "ckpt.pt"
    assert restored_checkpoint(["a", "b"], 4, ("a", "b")) == "state"


def test_folders_of_a_selection_are_checkpoints_by_their_names():
    entries = [("state/step_5/model.bin", 1, 1), ("state/step_5/sub/x", 1, 1), ("ckpt.pt", 1, 1)]
    assert step_folders(entries) == {"state/step_5": ["model.bin", "sub/x"]}


# --- the capture loop: selections without checkpoint folders ------------------------------------


def _poll(capture) -> None:
    """Two looks at the selection (the walk runs at most every POLL_S)."""
    for _ in range(2):
        capture._looked = float("-inf")
        capture.tick()


@pytest.mark.slow  # imports torch
def test_a_selection_without_checkpoint_folders_is_captured_while_it_trains(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("ckpt.pt",)))
    path = os.path.join(ws.copy, "ckpt.pt")
    _torch_file(path)
    _poll(capture)
    _torch_file(path, megabytes=0.3)
    _poll(capture)
    steps = [m.step for m in store.list(run=run_id)]
    assert steps == [1, 2]  # the capture's count: no name or key carries a step, never 0


@pytest.mark.slow  # imports torch
def test_a_selection_is_captured_with_the_step_its_names_carry(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("checkpoints",)))
    folder = os.path.join(ws.copy, "checkpoints")
    os.makedirs(folder)
    _torch_file(os.path.join(folder, "epoch=0-step=20.ckpt"))
    _poll(capture)
    _torch_file(os.path.join(folder, "epoch=1-step=40.ckpt"))
    _poll(capture)
    assert [m.step for m in store.list(run=run_id)] == [20, 40]


@pytest.mark.slow  # imports torch
def test_a_torn_file_in_a_selection_is_never_committed(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("ckpt.pt",)))
    path = os.path.join(ws.copy, "ckpt.pt")
    data = _torch_file(path)
    _poll(capture)
    (good,) = store.list(run=run_id)
    with open(path, "wb") as handle:  # torch.save in place, killed half way
        handle.write(data[: len(data) // 2])
    _poll(capture)
    capture.final_capture()
    assert store.list(run=run_id) == [good]
    torn = [e["details"] for e in catalog.events(run_id) if e["type"] == "checkpoint_incomplete"]
    assert torn and torn[-1]["path"] == "ckpt.pt" and "central directory" in torn[-1]["why"]
    doc_samples.check("incomplete-torn", _shown("checkpoint_incomplete", torn))


def test_after_a_death_by_signal_what_changed_just_before_is_not_taken(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("state",)))
    path = os.path.join(ws.state, "progress.json")
    with open(path, "w") as handle:  # a format nodus cannot check, written right before a kill
        handle.write('{"step": 3}')
    capture.final_capture(died_at=time.time())
    assert store.list(run=run_id) == []
    (event,) = [e for e in catalog.events(run_id) if e["type"] == "checkpoint_incomplete"]
    assert event["details"]["path"] == "state/progress.json"
    assert "signal" in event["details"]["why"] and event["details"]["reason"] == "exit"
    doc_samples.check("incomplete-signal", _shown("checkpoint_incomplete", [event["details"]]))
    capture.final_capture()  # a clean exit: all is taken
    assert [m.step for m in store.list(run=run_id)] == [1]


@pytest.mark.slow  # imports torch
def test_the_time_rule_leaves_out_a_checkpoint_folder_for_the_whole_one_before(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("state",)))
    for step in (10, 20):
        folder = os.path.join(ws.state, f"checkpoint-{step}")
        os.makedirs(folder)
        _torch_file(os.path.join(folder, "state.pt"))
        if step == 10:
            old = time.time() - 30
            os.utime(os.path.join(folder, "state.pt"), (old, old))
    capture.final_capture(died_at=time.time())
    assert [m.step for m in store.list(run=run_id)] == [10]


@pytest.mark.slow  # imports torch
def test_an_accelerate_folder_by_step_waits_for_its_registered_objects(setup, no_settling):
    """``save_state("state/step_N")`` with one registered object: a later folder lacking it
    (killed after the RNG states) is not whole."""
    import torch
    from safetensors.torch import save_file

    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("state",)))
    names = ("model.safetensors", "optimizer.bin", "random_states_0.pkl")
    for step, customs in ((5, 1), (10, 0)):
        folder = os.path.join(ws.state, f"step_{step}")
        os.makedirs(folder)
        for name in names + tuple(f"custom_checkpoint_{i}.pkl" for i in range(customs)):
            if name.endswith(".safetensors"):
                save_file({"w": torch.ones(4)}, os.path.join(folder, name))
            else:
                _torch_file(os.path.join(folder, name), 0.01)
        _poll(capture)
    assert [m.step for m in store.list(run=run_id)] == [5]
    torn = [e["details"] for e in catalog.events(run_id) if e["type"] == "checkpoint_incomplete"]
    assert torn[-1]["path"] == "state/step_10" and "custom_checkpoint_0" in torn[-1]["why"]


def test_an_empty_checkpoint_folder_is_never_a_snapshot(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("state",)))
    os.makedirs(os.path.join(ws.state, "checkpoint-20"))  # killed right after mkdir
    capture.final_capture()
    assert store.list(run=run_id) == []


# --- validate says how a selection is captured --------------------------------------------------


def test_the_capture_plan_names_the_step_names_and_the_resume_arguments():
    plain = capture_plan(stage(), settle_s=1)
    assert any("checkpoint_N" in line and "capture's count" in line for line in plain)
    assert any("torch.save checkpoint global_step, iter_num" in line for line in plain)
    keyed = capture_plan(contract(("out",), step_key="n_updates"), settle_s=1)
    assert any("torch.save checkpoint step_key 'n_updates'" in line for line in keyed)
    named = contract(("state",), checkpoint_name="model_{step}.pt", resume_args=("--r", "x"))
    lines = capture_plan(named, settle_s=1)
    assert any("'model_{step}.pt'" in line for line in lines) and "adds --r x" in lines[-1]
    for paths in (("ckpt.pt",), ("out", "checkpoints")):
        lines = capture_plan(contract(paths), settle_s=1)
        assert not any("checkpoint-<step>" in line for line in lines) and lines[0].startswith(
            "the whole selection once unchanged for 1 s"
        )
    for paths in (("state",), (".",), ("state/", "out")):
        assert "state/checkpoint-<step>" in capture_plan(contract(paths), settle_s=1)[0]
    integrated = capture_plan(stage(integration="hf-trainer-v1"))
    assert integrated == [
        "hf-trainer-v1 saves state/checkpoint-<step> every 50 steps, captured at once"
    ]


# --- suspects: the bound on stepping back -------------------------------------------------------


class _Manifest:
    def __init__(self, step):
        self.step = step


def _event(type_, stage_, **details):
    return {"type": type_, "stage": stage_, "details": details}


def test_a_failed_restore_steps_back_at_most_max_step_back_times_in_a_row():
    older = [_Manifest(10)]
    first = {"snapshot": "ckpt_a", "step": 30}
    assert suspects.decide([], "main", first, older, 0, 10).go_on
    row = [_event(suspects.EVENT, "main", **first)]
    second = {"snapshot": "ckpt_b", "step": 20}
    assert suspects.decide(row, "main", second, older, 1, 10).go_on
    row.append(_event(suspects.EVENT, "main", **second))
    third = suspects.decide(row, "main", {"snapshot": "ckpt_c", "step": 10}, older, 2, 10)
    assert not third.go_on and "ckpt_a (step 30), ckpt_b (step 20), ckpt_c (step 10)" in third.why
    # a commit ends the row: an older failure does not count against a new one
    fresh = [*row, _event("snapshot_committed", "main", snapshot="ckpt_d", step=40)]
    assert suspects.decide(fresh, "main", {"snapshot": "ckpt_d", "step": 40}, older, 2, 10).go_on


def test_stepping_back_stops_without_an_older_snapshot_or_recoveries():
    suspect = {"snapshot": "ckpt_a", "step": 30}
    assert "no older snapshot" in suspects.decide([], "main", suspect, [], 0, 10).why
    assert "max_recoveries" in suspects.decide([], "main", suspect, [_Manifest(1)], 3, 3).why


def test_the_last_error_line_is_the_programs_last_words(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("step 1\nTraceback:\n  ...\nRuntimeError: failed finding central directory\n\n")
    assert suspects.last_error_line(str(log)).startswith("RuntimeError: failed finding")
    assert suspects.last_error_line(str(tmp_path / "missing")) == ""


class _Snapshot:
    def __init__(self, id_, step):
        self.id, self.step, self.attempt, self.kinds = id_, step, 1, ("files",)
        self.created, self.role = f"2026-01-01T00:00:{step:02d}", "checkpoint"
        self.files = [None]


def test_restores_pass_over_suspects_and_a_step_back_never_steps_forward(monkeypatch):
    snapshots = [_Snapshot(f"ckpt_{step}", step) for step in (10, 20, 30)]
    monkeypatch.setattr(suspects, "newest_first", lambda ms: sorted(ms, key=lambda m: -m.step))
    marked = [_event(suspects.EVENT, "main", snapshot="ckpt_30", step=30)]
    assert [m.step for m in suspects.usable(snapshots, marked, "main")] == [20, 10]
    assert [m.step for m in suspects.usable(snapshots, [], "other")] == [30, 20, 10]
    # `runs resume --step 10` failed: stepping back from 10 finds nothing, not 30
    assert suspects.usable(snapshots, [], "main", older_than="ckpt_10") == []
    assert [m.step for m in suspects.usable(snapshots, [], "main", older_than="ckpt_30")] == [
        20,
        10,
    ]


@pytest.mark.parametrize(
    "continuity, refusal",
    [
        ('checkpoint_name = "model.pt"', "{step} exactly once"),
        ('checkpoint_name = "a/{step}"', "no '/'"),
        ('checkpoint_name = "m{step}{rank}"', "not {rank}"),
        ('resume_args = ["--from", "{path}"]', "not {path}"),
    ],
)
def test_the_directory_contracts_keys_are_checked_when_the_file_is_read(
    tmp_path, continuity, refusal
):
    from nodus.errors import WorkloadError
    from nodus.schemas.loader import resolve_file

    path = tmp_path / "w.toml"
    path.write_text(f'name = "w"\ncommand = ["python", "t.py"]\n[continuity]\n{continuity}\n')
    with pytest.raises(WorkloadError, match=re.escape(refusal)):
        resolve_file(str(path))


@pytest.mark.parametrize("integration", ["auto", "hf-trainer-v1"])
def test_resume_args_are_refused_where_an_integration_resumes_the_program(tmp_path, integration):
    from nodus.errors import WorkloadError
    from nodus.schemas.loader import resolve_file

    path = tmp_path / "w.toml"
    path.write_text(
        f'name = "w"\ncommand = ["python", "t.py"]\nintegration = "{integration}"\n'
        '[continuity]\nresume_args = ["--resume", "{checkpoint}"]\n'
    )
    with pytest.raises(WorkloadError, match=r"continuity\.resume_args.*has no effect"):
        resolve_file(str(path))


def _shown(kind: str, details: list[dict]) -> str:
    """Events as docs/recovery.md shows them: the type, then its details as JSON."""
    return "\n".join(f"{kind}  {json.dumps(each)}" for each in details)
