"""A checkpoint whose format proves it whole is taken even when written just before a death.

The time rule (what changed within the settle window before a death by signal is not taken)
stays for what cannot be proven; what is torn is never taken. The proofs are tables here
(:mod:`nodus.stages.completeness`); the capture loop's use of them follows, and
tests/runner/test_directory_programs.py kills real programs right after a save.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import time
import zipfile

import pytest
from test_runner_capture import capturer, contract

from nodus.stages import completeness
from nodus.stages.completeness import TORN, UNPROVEN, WHOLE

# --- single files -----------------------------------------------------------------------------


def _zip(members: dict[str, bytes]) -> bytes:
    """A zip archive of stored members, as torch.save writes them (uncompressed)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            # a fixed date: the bytes (and so the tests' ids) are the same in every process
            archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


def _hollowed(data: bytes, keep: int) -> bytes:
    """The archive's first ``keep`` bytes, then its central directory and end record moved
    right after them: the end records are there, a member's bytes are not."""
    directory_at = struct.unpack("<I", data[-6:-2])[0]
    tail = bytearray(data[directory_at:])
    tail[-6:-2] = struct.pack("<I", keep)
    return data[:keep] + bytes(tail)


def _moved_member(data: bytes) -> bytes:
    """The central directory points its member's local header at the wrong offset."""
    directory_at = struct.unpack("<I", data[-6:-2])[0]
    patched = bytearray(data)
    patched[directory_at + 42 : directory_at + 46] = struct.pack("<I", 7)
    return bytes(patched)


def _safetensors(extra: bytes = b"") -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    return struct.pack("<Q", len(header)) + header + bytes(16) + extra


ARCHIVE = _zip({"archive/data.pkl": pickle.dumps({"step": 3}), "archive/data/0": bytes(4096)})
SAFETENSORS = _safetensors()


@pytest.mark.parametrize(
    "name, data, outcome",
    [
        ("ckpt.pt", ARCHIVE, WHOLE),
        ("ckpt.pt", ARCHIVE[: len(ARCHIVE) // 2], TORN),  # cut off: no end record
        ("ckpt.pt", ARCHIVE[:-1], TORN),
        ("ckpt.pt", _hollowed(ARCHIVE, 300), UNPROVEN),  # end records there, a member cut off
        ("ckpt.pt", _moved_member(ARCHIVE), UNPROVEN),  # a member's header is not where said
        ("last.ckpt", ARCHIVE, WHOLE),
        ("model.safetensors", SAFETENSORS, WHOLE),
        ("model.safetensors", SAFETENSORS[:-3], TORN),  # the tensors' bytes cut off
        ("model.safetensors", _safetensors(b"more"), UNPROVEN),  # bytes no header accounts for
        ("rng.pkl", pickle.dumps({"seed": list(range(40))}), WHOLE),
        ("rng.pkl", pickle.dumps({"seed": list(range(40))})[:-1], TORN),
        ("trainer_state.json", b'{"global_step": 20}', UNPROVEN),  # whole only in a layout
        ("progress.txt", b"step 20", UNPROVEN),  # a format of the program's own
        ("weights.bin", b"\x00raw floats", UNPROVEN),
        ("model.safetensors.tmp", SAFETENSORS, TORN),  # a write under way
    ],
    ids=lambda value: value if isinstance(value, str) else f"{len(value)}B",
)
def test_a_single_file_is_proven_whole_only_when_its_format_covers_every_byte(
    tmp_path, name, data, outcome
):
    path = tmp_path / name
    path.write_bytes(data)
    proof = completeness.of_file(str(path), name)
    assert proof.outcome == outcome, proof.why
    assert proof.why


@pytest.mark.slow  # imports torch
def test_torch_save_archives_are_proven_whole_and_their_prefixes_never(tmp_path):
    import torch

    for megabytes, name in ((0.1, "ckpt.pt"), (8, "big.pt")):  # the big one has zip64 records
        path = tmp_path / name
        torch.save({"w": torch.arange(int(megabytes * 262144), dtype=torch.float32)}, path)
        data = path.read_bytes()
        assert completeness.of_file(str(path)).whole
        for cut in (1, 64, len(data) // 2, len(data) - 22, len(data) - 1):
            path.write_bytes(data[:cut])
            assert completeness.of_file(str(path)).outcome == TORN, cut


# --- folders ----------------------------------------------------------------------------------


def _folder(root, files: dict[str, bytes], order: list[str] | None = None) -> list:
    """Write ``files`` into ``root``, in ``order`` (the rest first), a second apart."""
    root.mkdir(exist_ok=True)
    names = [n for n in files if n not in (order or [])] + list(order or [])
    entries = []
    for at, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])
        stamp = 1_700_000_000 + at
        os.utime(path, (stamp, stamp))
        entries.append((name, len(files[name]), stamp * 1_000_000_000))
    return entries


TRAINER = {"model.safetensors": SAFETENSORS, "optimizer.pt": ARCHIVE, "rng_state.pth": ARCHIVE}
ACCELERATE = {"model.safetensors": SAFETENSORS, "optimizer.bin": ARCHIVE}


@pytest.mark.parametrize(
    "files, last, marker, custom, outcome, why",
    [
        (TRAINER, {"trainer_state.json": b'{"global_step": 5}'}, None, None, WHOLE, "written last"),
        (TRAINER, {}, None, None, TORN, "trainer_state.json"),
        (TRAINER, {"trainer_state.json": b"step 5"}, None, None, UNPROVEN, "cannot be proven"),
        (ACCELERATE, {"random_states_0.pkl": ARCHIVE}, None, 0, WHOLE, "random_states_0.pkl"),
        (  # the program's count of registered objects: not known from an earlier folder
            ACCELERATE,
            {"random_states_0.pkl": ARCHIVE},
            None,
            None,
            UNPROVEN,
            "registers for checkpointing",
        ),
        (
            ACCELERATE,
            {"random_states_0.pkl": ARCHIVE, "custom_checkpoint_0.pkl": ARCHIVE},
            None,
            2,
            TORN,
            "custom_checkpoint_1.pkl",
        ),
        (
            ACCELERATE,
            {"random_states_0.pkl": ARCHIVE, "custom_checkpoint_0.pkl": ARCHIVE},
            None,
            1,
            WHOLE,
            "custom_checkpoint_0.pkl",
        ),
        ({"model.pt": ARCHIVE, "optimizer.pt": ARCHIVE}, {}, None, 0, UNPROVEN, "no known layout"),
        ({"weights.bin": b"raw"}, {"DONE": b""}, "DONE", None, WHOLE, "DONE"),  # touched
        ({"weights.bin": b"raw"}, {"DONE": b"ok"}, "DONE", None, UNPROVEN, "DONE"),
        ({"weights.bin": b"raw"}, {}, "DONE", None, TORN, "DONE"),
        ({"model.safetensors": SAFETENSORS[:-2]}, {"DONE": b""}, "DONE", None, TORN, "cut off"),
    ],
)
def test_a_folder_is_proven_whole_by_its_layouts_completing_file(
    tmp_path, files, last, marker, custom, outcome, why
):
    entries = _folder(tmp_path / "step_5", {**files, **last}, order=list(last))
    proof = completeness.of_folder(str(tmp_path / "step_5"), entries, marker, custom)
    assert proof.outcome == outcome and why in proof.why, proof


def test_a_completing_file_older_than_the_rest_proves_nothing(tmp_path):
    """A Trainer rewriting ``checkpoint-<step>`` in place: the previous save's last file stays
    while the new weights are written next to it."""
    files = {**TRAINER, "trainer_state.json": b'{"global_step": 5}'}
    entries = _folder(tmp_path / "checkpoint-5", files, order=["trainer_state.json", *TRAINER])
    proof = completeness.of_folder(str(tmp_path / "checkpoint-5"), entries)
    assert proof.outcome == UNPROVEN and "older" in proof.why


# --- the capture loop after a death by signal -------------------------------------------------


def _incomplete(catalog, run_id) -> list[dict]:
    return [e["details"] for e in catalog.events(run_id) if e["type"] == "checkpoint_incomplete"]


def test_a_whole_file_written_just_before_a_death_is_taken(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("ckpt.pt",)))
    with open(os.path.join(ws.copy, "ckpt.pt"), "wb") as handle:  # torch.save, then killed
        handle.write(ARCHIVE)
    capture.final_capture(died_at=time.time())
    assert len(store.list(run=run_id)) == 1
    assert not _incomplete(catalog, run_id)


def test_a_torn_file_written_just_before_a_death_is_never_taken(setup, no_settling):
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("ckpt.pt",)))
    with open(os.path.join(ws.copy, "ckpt.pt"), "wb") as handle:
        handle.write(ARCHIVE[:-40])
    capture.final_capture(died_at=time.time())
    assert store.list(run=run_id) == []
    assert "central directory" in _incomplete(catalog, run_id)[0]["why"]


def test_two_files_written_just_before_a_death_keep_the_time_rule(setup, no_settling):
    """``model.pt`` and ``optimizer.pt`` saved one after the other: each whole, the pair maybe
    not (killed between them), so they are not taken on their own proofs."""
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("out",)))
    os.makedirs(os.path.join(ws.copy, "out"))
    for name in ("model.pt", "optimizer.pt"):
        with open(os.path.join(ws.copy, "out", name), "wb") as handle:
            handle.write(ARCHIVE)
    capture.final_capture(died_at=time.time())
    assert store.list(run=run_id) == []
    assert "signal" in _incomplete(catalog, run_id)[0]["why"]


def test_a_whole_file_beside_an_older_part_of_its_save_keeps_the_time_rule(setup, no_settling):
    """``optimizer.pt`` left from the save before (laid out by a restore), ``model.pt`` of the
    new save written just before the kill: the pair is two saves."""
    catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("out",)))
    os.makedirs(os.path.join(ws.copy, "out"))
    for name in ("optimizer.pt", "model.pt"):
        with open(os.path.join(ws.copy, "out", name), "wb") as handle:
            handle.write(ARCHIVE)
    old = time.time() - 60
    os.utime(os.path.join(ws.copy, "out", "optimizer.pt"), (old, old))
    capture.final_capture(died_at=time.time())
    assert store.list(run=run_id) == []
    assert _incomplete(catalog, run_id)[0]["path"] == "out/model.pt"


def test_lightning_checkpoint_files_written_just_before_a_death_are_taken(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("checkpoints",)))
    os.makedirs(os.path.join(ws.copy, "checkpoints"))
    for name in ("epoch=0-step=14.ckpt", "last.ckpt"):
        with open(os.path.join(ws.copy, "checkpoints", name), "wb") as handle:
            handle.write(ARCHIVE)
    capture.final_capture(died_at=time.time())
    assert [m.step for m in store.list(run=run_id)] == [14]


def _accelerate_folder(ws, step: int, customs: int) -> None:
    folder = os.path.join(ws.state, f"step_{step}")
    os.makedirs(folder)
    names = ["model.safetensors", "optimizer.bin", "random_states_0.pkl"]
    for name in names + [f"custom_checkpoint_{i}.pkl" for i in range(customs)]:
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(SAFETENSORS if name.endswith(".safetensors") else ARCHIVE)


def test_an_accelerate_folder_written_just_before_a_death_is_taken_once_its_count_is_known(
    setup, no_settling
):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("state",)))
    _accelerate_folder(ws, 5, customs=2)
    capture.final_capture(died_at=time.time())  # the program's first folder: count not known
    assert store.list(run=run_id) == []
    capture.final_capture()  # (it settled and was taken while the program trained)
    _accelerate_folder(ws, 10, customs=2)
    capture.final_capture(died_at=time.time())
    assert [m.step for m in store.list(run=run_id)] == [5, 10]


def test_a_checkpoint_folder_written_just_before_a_death_is_taken_when_whole(setup, no_settling):
    _catalog, run_id, store, ws = setup
    capture = capturer(setup, stage=contract(("state",)))
    folder = os.path.join(ws.state, "checkpoint-20")
    os.makedirs(folder)
    for name, data in TRAINER.items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(data)
    with open(os.path.join(folder, "trainer_state.json"), "w") as handle:
        handle.write('{"global_step": 20}')
    capture.final_capture(died_at=time.time())
    assert [m.step for m in store.list(run=run_id)] == [20]
