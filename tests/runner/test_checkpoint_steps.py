"""A snapshot's step is the program's: from its names, else from inside its checkpoint
(:mod:`nodus.stages.recorded_steps`), else the capture's count, said ``capture N``."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import time
import zipfile
from collections import OrderedDict

import pytest
from test_runner_capture import capturer, contract, stage
from test_torn_checkpoints import _poll

from nodus.inventory.narration import _restoring
from nodus.inventory.runs import restored_text, step_text
from nodus.runner.capture.capturer import Capturer
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.stages import recorded_steps, step_names
from nodus.store.manifest import Manifest, step_label


class _Storage:
    """What a tensor pickles as in ``torch.save``'s ``data.pkl``: a persistent id."""

    def __init__(self, key: str) -> None:
        self.key = key


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", "FloatStorage", obj.key, "cpu", 4) if isinstance(obj, _Storage) else None


def _archive(path, obj, protocol: int = 2, name: str = "archive") -> str:
    """A file laid out as ``torch.save`` lays one out: a zip with ``<name>/data.pkl``."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=protocol).dump(obj)
    with zipfile.ZipFile(path, "w") as archive:  # a fixed time, as torch.save writes: same bytes
        for member, data in [("data.pkl", buffer.getvalue()), ("data/0", b"\0" * 16)]:
            archive.writestr(zipfile.ZipInfo(f"{name}/{member}", (1980, 1, 1, 0, 0, 0)), data)
    return str(path)


_MODEL = OrderedDict((f"layer{i}.weight", _Storage(str(i))) for i in range(3))


@pytest.mark.parametrize(
    "obj, key, expected",
    [
        # nanoGPT: the step beside the model, the optimizer and the config
        (
            {"model": _MODEL, "optimizer": {"state": {}}, "iter_num": 1200, "best_val_loss": 1.5},
            None,
            (1200, None),
        ),
        # Lightning: global_step and epoch at the top
        ({"epoch": 3, "global_step": 420, "state_dict": _MODEL}, None, (420, 3)),
        ({"step": 7, "model": _MODEL}, None, (7, None)),
        ({"iteration": 9, "epoch": 0.5}, None, (9, 0.5)),
        # only the top level counts: a step inside the config is not the checkpoint's
        ({"model": _MODEL, "config": {"step": 5, "iter_num": 6}}, None, None),
        # a key of the program's own, named by step_key; then the known keys are not read
        ({"n_updates": 31, "step": 2}, "n_updates", (31, None)),
        ({"step": 2}, "n_updates", None),
        # not whole numbers: never a step
        ({"step": "12", "iter_num": True, "global_step": 1.5}, None, None),
        ({"step": -4}, None, None),
        (OrderedDict(step=11, w=_Storage("0")), None, (11, None)),
        ([1, 2, 3], None, None),
    ],
)
@pytest.mark.parametrize("protocol", [2, 4])
def test_the_step_a_checkpoint_records_at_its_top_level(tmp_path, obj, key, expected, protocol):
    path = _archive(tmp_path / "ckpt.pt", obj, protocol)
    found = recorded_steps.read(path, key)
    assert (None if found is None else (found.step, found.epoch)) == expected


def test_many_items_are_read_in_their_batches(tmp_path):
    """Pickle sets at most 1000 items at a time: the step may be in any batch."""
    many = {f"w{i}": _Storage(str(i)) for i in range(2500)}
    many["iter_num"] = 77
    assert recorded_steps.read(_archive(tmp_path / "a.pt", many), None).step == 77


class _Hostile:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_hostile_pickle_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    _Hostile.marker = str(marker)
    data = pickle.dumps({"step": 4, "x": _Hostile()}, protocol=2)
    assert b"system" in data
    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as archive:
        archive.writestr("evil/data.pkl", data)
    found = recorded_steps.read(str(tmp_path / "evil.pt"))
    assert found is not None and found.step == 4  # read as plain numbers, the global ignored
    assert not marker.exists()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a checkpoint",
        b"PK\x03\x04 a torn zip",
        b"\x80\x02}q\x00(X\x04\x00\x00\x00stepq\x01K\x03u",  # no STOP: cut off
        b"\x80\x02K\x03u.",  # SETITEMS with no mark
        b"\x80\x02X\xff\xff\xff\x7f",  # a string claiming 2 GiB
    ],
)
def test_damage_reads_as_no_step(tmp_path, data):
    path = tmp_path / "x.pt"
    path.write_bytes(data)
    assert recorded_steps.read(str(path)) is None
    if data.startswith(b"\x80"):
        with zipfile.ZipFile(tmp_path / "z.pt", "w") as archive:
            archive.writestr("z/data.pkl", data)
        assert recorded_steps.read(str(tmp_path / "z.pt")) is None


def test_a_huge_pickle_is_read_no_further_than_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded_steps, "MOST_BYTES", 4096)
    big = {f"w{i}": i for i in range(2000)}
    big["step"] = 3
    path = _archive(tmp_path / "big.pt", big)
    started = time.perf_counter()
    assert recorded_steps.read(path) is None
    assert time.perf_counter() - started < 1
    monkeypatch.setattr(recorded_steps, "MOST_BYTES", 64 * 2**20)
    assert recorded_steps.read(path).step == 3


def test_the_walk_keeps_only_plain_values():
    """Each opcode the pickles above use is known to the walk (its stack effect documented)."""
    data = pickle.dumps({"a": [1, {"b": 2}], "c": (3.0, None), "step": 5}, protocol=4)
    assert {op.name for op, _arg, _pos in pickletools.genops(data)} >= {"FRAME", "MEMOIZE"}


# --- names: the epoch beside the step --------------------------------------------------------


@pytest.mark.parametrize(
    "paths, template, expected",
    [
        (["c/epoch=2-step=300.ckpt", "c/last.ckpt"], None, (300, 2)),
        (["c/step=300.ckpt"], None, (300, None)),
        (["e3-s40.bin"], "e{epoch}-s{step}.bin", (40, 3)),
        (["e3-s40-e3.bin"], "e{epoch}-s{step}-e{epoch}.bin", (40, 3)),
        (["model_12.pt"], "model_{step}.pt", (12, None)),
    ],
)
def test_a_name_carries_the_epoch_beside_its_step(paths, template, expected):
    found = step_names.step_of(paths, template)
    assert (found.step, found.epoch) == expected


# --- how a step is said ------------------------------------------------------------------------


def test_a_counted_step_is_said_as_a_capture():
    assert step_label(40, False) == "step 40"
    assert step_label(3, True) == "capture 3"
    assert step_text({"step": None, "capture": 3}) == "capture 3"
    assert step_text({"step": 40, "capture": None}) == "step 40"
    attempt = {"number": 2, "restored_step": 3, "restored_snapshot": "ckpt_1"}
    assert _restoring(attempt, "", counted=True) == "restoring capture 3 (ckpt_1) → attempt 2"
    assert _restoring(attempt, "") == "restoring step 3 (ckpt_1) → attempt 2"
    assert restored_text({"restored_step": None, "restored_capture": 3}) == "capture 3"
    assert restored_text({"restored_step": 80, "restored_capture": None}) == "step 80"
    assert restored_text({"restored_step": None, "restored_capture": None}) is None


def test_a_manifest_written_before_step_sources_reads_as_before():
    stored = {
        "format": 1,
        "id": "ckpt_0123456789abcdef",
        "run": "r",
        "stage": "main",
        "attempt": 1,
        "step": 4,
        "epoch": None,
        "metrics": {},
        "role": "checkpoint",
        "created": 1.0,
        "files": [],
    }
    old = Manifest.from_dict(stored)
    assert old.step_source is None and not old.counted
    assert "step_source" not in old.stored_dict()  # written back byte for byte as it was
    counted = Manifest.from_dict({**stored, "step_source": "capture"})
    assert counted.counted and counted.stored_dict()["step_source"] == "capture"
    with pytest.raises(ValueError, match="step_source"):
        Manifest.from_dict({**stored, "step_source": "guess"})


# --- the capture loop ----------------------------------------------------------------------


def _selection(setup, paths=("out",), **continuity):
    return capturer(setup, stage=contract(paths, **continuity))


def _save(ws, obj, path="out/ckpt.pt") -> None:
    full = os.path.join(ws.copy, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    _archive(full + ".new", obj)
    os.replace(full + ".new", full)
    # a new mtime for each save, however coarse the clock
    stamp = time.time_ns() + len(os.listdir(os.path.dirname(full))) * 10**9
    os.utime(full, ns=(stamp, stamp))


def _steps(store, run_id):
    return [(m.step, m.epoch, m.step_source) for m in store.list(run=run_id)]


def test_a_selection_takes_the_step_its_checkpoint_records(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = _selection(setup)
    for iter_num in (250, 500):
        _save(ws, {"model": _MODEL, "iter_num": iter_num})
        _poll(capture)
    assert _steps(store, run_id) == [(250, None, "checkpoint"), (500, None, "checkpoint")]
    committed = [e["details"] for e in catalog.events(run_id, types=("snapshot_committed",))]
    assert [d["step"] for d in committed] == [250, 500]
    assert not any(d.get("counted") for d in committed)


def test_lightning_names_give_the_step_and_epoch_and_last_ckpt_its_record(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = _selection(setup, ("checkpoints",))
    _save(ws, {"epoch": 0, "global_step": 10}, "checkpoints/last.ckpt")
    _poll(capture)
    _save(ws, {"epoch": 1, "global_step": 20}, "checkpoints/epoch=1-step=20.ckpt")
    _poll(capture)
    assert _steps(store, run_id) == [(10, 0, "checkpoint"), (20, 1, "name")]


def test_step_key_names_the_programs_own_key(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = _selection(setup, step_key="n_updates")
    _save(ws, {"n_updates": 64, "step": 2})
    _poll(capture)
    assert _steps(store, run_id) == [(64, None, "checkpoint")]


def test_without_a_step_anywhere_captures_are_counted_and_said_so(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = _selection(setup)
    for version in (1, 2):
        _save(ws, {"model": _MODEL, "version": version})
        _poll(capture)
    assert _steps(store, run_id) == [(1, None, "capture"), (2, None, "capture")]
    committed = [e["details"] for e in catalog.events(run_id, types=("snapshot_committed",))]
    assert [(d["step"], d.get("counted")) for d in committed] == [(1, True), (2, True)]


def test_a_counted_snapshot_carries_the_newest_logged_metrics(setup, no_settling):
    """A capture's count says nothing of the logs' steps: the snapshot carries the newest value
    of each name the program logged, not those logged at steps up to its count."""
    _catalog, run_id, store, ws = setup
    capture = _selection(setup)
    with open(os.path.join(ws.copy, "metrics.jsonl"), "w") as log:
        log.write('{"step": 1, "loss": 9.0}\n{"step": 300, "loss": 0.5}\n')
    _save(ws, {"model": _MODEL})
    _poll(capture)
    (snapshot,) = store.list(run=run_id)
    assert snapshot.counted and snapshot.step == 1
    assert snapshot.metrics == {"loss": 0.5}


def _restored(setup, first_id, step):
    catalog, run_id, store, ws = setup
    number = catalog.start_attempt(run_id, "main")
    manifest = store.get(first_id)
    context = AttemptContext(store, catalog, run_id, contract(("out",)), number)
    return Capturer(context, ws, restored_step=step, restored_snapshot=first_id, restored=manifest)


def test_a_resume_writing_back_what_it_restored_adds_no_capture(setup, no_settling):
    _catalog, run_id, store, ws = setup
    first = _selection(setup)
    _save(ws, {"model": _MODEL, "version": 1})
    _poll(first)
    (restored,) = store.list(run=run_id)
    resumed = _restored(setup, restored.id, restored.step)
    _save(ws, {"model": _MODEL, "version": 1})  # the same bytes again, a new mtime
    _poll(resumed)
    resumed.final_capture()
    assert [m.id for m in store.list(run=run_id)] == [restored.id]
    _save(ws, {"model": _MODEL, "version": 2})  # progress: the next capture
    _poll(resumed)
    assert _steps(store, run_id) == [(1, None, "capture"), (2, None, "capture")]


def test_a_resume_saving_its_restored_step_again_stays_at_that_step(setup, no_settling):
    catalog, run_id, store, ws = setup
    first = _selection(setup)
    _save(ws, {"iter_num": 80, "best_val_loss": 2.0})
    _poll(first)
    (restored,) = store.list(run=run_id)
    resumed = _restored(setup, restored.id, 80)
    _save(ws, {"iter_num": 80, "best_val_loss": 1.9})  # nanoGPT's save right after resuming
    _poll(resumed)
    assert [m.step for m in store.list(run=run_id)] == [80, 80]
    assert not [e for e in catalog.events(run_id) if e["type"] == "restore_ignored"]


def test_stage_without_selection_contract_keeps_its_defaults():
    assert stage().continuity.step_key is None


def test_memoized_keys_are_read_back_as_written(tmp_path):
    """Protocol 4 memoizes every object by count: a key fetched from the memo is the right one,
    however many opaque objects were memoized before it."""
    shared = "iter_num"
    obj = {"model": _MODEL, "a": [shared], "b": {shared: 1}, shared: 42, "epoch": 2}
    found = recorded_steps.read(_archive(tmp_path / "m.pt", obj, protocol=4))
    assert (found.step, found.epoch) == (42, 2)


def test_a_pickle_of_more_objects_than_a_checkpoint_is_not_read_through(tmp_path, monkeypatch):
    monkeypatch.setattr(recorded_steps, "MOST_OPS", 1000)
    big = {f"w{i}": i for i in range(2000)}
    big["step"] = 3
    assert recorded_steps.read(_archive(tmp_path / "big.pt", big)) is None


@pytest.mark.slow  # imports torch
def test_real_torch_save_files_are_read_without_loading_them(tmp_path):
    import torch

    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    nano = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": 1200}
    lightning = {"epoch": 3, "global_step": 420, "state_dict": model.state_dict(), "loops": {}}
    cases = [
        (nano, {}, (1200, None)),
        (lightning, {}, (420, 3)),
        ({"step": 9, "w": torch.zeros(3)}, {"_use_new_zipfile_serialization": False}, (9, None)),
        ({"model": model.state_dict(), "config": {"iter_num": 5}}, {}, None),
    ]
    for index, (obj, options, expected) in enumerate(cases):
        path = str(tmp_path / f"{index}.pt")
        torch.save(obj, path, **options)
        found = recorded_steps.read(path)
        assert (None if found is None else (found.step, found.epoch)) == expected, index


def test_the_ui_says_a_counted_step_as_a_capture():
    from nodus.ui.pages.run_tables import attempts_table, snapshots_table

    row = {
        "id": "ckpt_0123456789abcdef",
        "step": None,
        "capture": 3,
        "epoch": None,
        "attempt": 1,
        "bytes_by_kind": {"files": 10},
        "holds": [],
        "metrics": {},
        "deleted_kinds": [],
    }
    shown = str(snapshots_table([row, {**row, "step": 40, "capture": None}]))
    assert ">capture 3<" in shown and ">40<" in shown
    attempt = {
        "number": 2,
        "outcome": None,
        "detail": None,
        "restored_step": None,
        "restored_capture": 3,
        "started_at": "2026-01-02T03:04:05.678Z",
        "ended_at": None,
        "host": None,
    }
    run = {"stages": [{"name": "main", "attempts": [attempt]}]}
    assert ">capture 3<" in str(attempts_table(run))
