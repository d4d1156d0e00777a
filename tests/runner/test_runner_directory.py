"""The directory contract: a checkpoint folder is reported once per settled form, and captured
only once it is whole (the layouts of the Trainer, Accelerate and torch DCP, or a marker)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nodus.stages.directory import DirectoryWatcher, signature
from nodus.stages.layouts import Verdict, judge


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_folder_is_reported_once_after_it_stops_changing(tmp_path):
    clock = Clock()
    watcher = DirectoryWatcher(str(tmp_path), settle_s=1.0, clock=clock)
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"1")
    assert watcher.poll() == []
    clock.now = 0.6
    (folder / "b.bin").write_bytes(b"22")  # still being written: the wait starts again
    assert watcher.poll() == []
    clock.now = 1.2
    assert watcher.poll() == []
    clock.now = 1.7
    assert watcher.poll() == [10]
    clock.now = 5.0
    assert watcher.poll() == []


def test_other_names_and_already_handled_steps_are_ignored(tmp_path):
    clock = Clock()
    for name in ("checkpoint-5", "checkpoint-7", "checkpoint-x", "notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    watcher = DirectoryWatcher(str(tmp_path), settle_s=0.5, seen={5}, clock=clock)
    watcher.poll()
    clock.now = 1.0
    assert watcher.poll() == [7]


# --- layouts: when a folder of a known layout is whole --------------------------------------

TRAINER = ["model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"]
ACCELERATE = ["model.safetensors", "optimizer.bin", "scheduler.bin", "sampler.bin", "scaler.pt"]
FSDP = [
    "pytorch_model_fsdp_0/__0_0.distcp",
    "pytorch_model_fsdp_0/.metadata",
    "optimizer_0/__0_0.distcp",
    "optimizer_0/.metadata",
]


def _prefixes(order: list[str]) -> list[list[str]]:
    return [order[:n] for n in range(1, len(order) + 1)]


def _model_then_arguments(files: list[str], order: list[str]) -> bool:
    """The one moment a Trainer folder reads as a finished ``save_pretrained``: its model (with
    config) is written and ``training_args.bin`` comes next, within milliseconds, so long before
    any settle time; the folder is taken as complete only if it stays like that."""
    following = order[len(files)] if len(files) < len(order) else None
    saved = {"config.json", "adapter_config.json"} & set(files) and any(
        name.endswith((".safetensors", ".bin")) for name in files
    )
    trainer_files = "training_args.bin" in files
    return bool(saved) and not trainer_files and following in ("training_args.bin", "optimizer.pt")


@pytest.mark.parametrize(
    "order",
    [
        [*TRAINER, "trainer_state.json"],  # Transformers' Trainer._save_checkpoint
        ["config.json", *TRAINER[:1], "training_args.bin", *TRAINER[1:], "trainer_state.json"],
        # a PEFT model's: adapter weights, the training arguments, the optimizer, the state
        [
            "adapter_config.json",
            "adapter_model.safetensors",
            "training_args.bin",
            "optimizer.pt",
            "trainer_state.json",
        ],
        [*ACCELERATE, "random_states_0.pkl"],  # accelerate's save_accelerator_state
        ["model.safetensors", "model_1.safetensors", "optimizer_1.bin", "random_states_3.pkl"],
        ["__0_0.distcp", "__1_0.distcp", ".metadata"],  # torch DCP
        ["__0_0.distcp", "__0.metadata"],  # DCP without rank coordination
        # FSDP's sharded state dict: DCP folders, then the Trainer's (or Accelerate's) files
        [*FSDP, "scheduler.pt", "rng_state_0.pth", "trainer_state.json"],
        [*FSDP, "scheduler.bin", "random_states_0.pkl"],
    ],
)
def test_a_known_layout_is_complete_only_once_its_last_file_is_written(order):
    *before, _last = _prefixes(order)
    assert [judge(files).complete for files in before] == [
        _model_then_arguments(files, order) for files in before
    ]
    assert judge(order).complete and judge(order).layout


def test_weights_alone_are_a_checkpoint_still_being_written_and_say_what_follows():
    for files in (
        ["model.safetensors"],  # Accelerate's save_state writes the model first, no config
        ["config.json", "model-00001-of-00002.safetensors"],  # shards before their index
        ["config.json", "model.safetensors", "training_args.bin"],  # the Trainer's, mid-save
    ):
        verdict = judge(files)
        assert not verdict.complete, files
        assert "trainer_state.json" in verdict.missing


def test_a_model_saved_with_save_pretrained_alone_is_complete_once_settled():
    """A custom loop saving only its model each epoch is still protected."""
    assert judge(["config.json", "model.safetensors"]) == Verdict()
    assert judge(["adapter_config.json", "adapter_model.safetensors", "README.md"]) == Verdict()
    shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert judge(["config.json", *shards, "model.safetensors.index.json"]) == Verdict()


def test_dcp_data_in_a_subfolder_needs_the_metadata_of_that_subfolder():
    files = ["model/__0_0.distcp", "model/.metadata", "optim/__0_0.distcp", "trainer_state.json"]
    verdict = judge(files)
    assert not verdict.complete and "optim/.metadata" in verdict.missing
    assert judge([*files, "optim/.metadata"]).complete


def test_a_folder_of_no_known_layout_is_complete_once_settled():
    assert judge(["state.json", "weights.bin", "notes/a.txt"]) == Verdict()


def test_the_marker_alone_decides_even_for_files_that_look_like_a_known_layout():
    files = ["model.safetensors", "progress.json"]
    assert not judge(files).complete  # looks like a Trainer checkpoint without its state
    assert not judge(files, marker="DONE").complete
    assert "DONE" in judge(files, marker="DONE").missing
    assert judge([*files, "DONE"], marker="DONE").complete
    assert not judge(["sub/DONE"], marker="DONE").complete  # directly inside the folder


# --- the watcher: settled forms, whole or not, and folders rewritten after their capture -----


def _write(folder, name: str, text: str = "x") -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)


def test_a_folder_written_in_place_is_reported_per_settled_form_and_whole_only_at_the_end(
    tmp_path,
):
    clock = Clock()
    watcher = DirectoryWatcher(str(tmp_path), settle_s=1.0, clock=clock)
    folder = tmp_path / "checkpoint-10"
    _write(folder, "model.safetensors")
    watcher.poll()
    clock.now = 2.0  # the optimizer gather of a big model: the weights sit there alone
    assert watcher.poll() == [10]
    assert not watcher.verdict(10, signature(str(folder))).complete
    clock.now = 3.0
    assert watcher.poll() == []  # that form was reported once
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        _write(folder, name)
    watcher.poll()
    clock.now = 4.5
    assert watcher.poll() == [10]
    assert watcher.verdict(10, signature(str(folder))).complete


def test_a_folder_rewritten_after_its_capture_is_whole_again_only_with_a_new_last_file(tmp_path):
    clock = Clock()
    watcher = DirectoryWatcher(str(tmp_path), settle_s=1.0, clock=clock)
    folder = tmp_path / "checkpoint-10"
    for name in ("model.safetensors", "optimizer.pt", "trainer_state.json"):
        _write(folder, name, "old")
    watcher.handled(10)  # captured as it is now
    clock.now = 1.0
    assert watcher.poll() == []
    _write(folder, "model.safetensors", "new weights")  # the old trainer_state.json is still there
    watcher.poll()
    clock.now = 2.5
    assert watcher.poll() == [10]
    verdict = watcher.verdict(10, signature(str(folder)))
    assert not verdict.complete and "trainer_state.json" in verdict.missing
    _write(folder, "optimizer.pt", "new moments")
    _write(folder, "trainer_state.json", "new state")
    watcher.poll()
    clock.now = 4.0
    assert watcher.poll() == [10]
    assert watcher.verdict(10, signature(str(folder))).complete


def test_a_folder_of_no_known_layout_changed_after_its_capture_is_reported_again(tmp_path):
    clock = Clock()
    watcher = DirectoryWatcher(str(tmp_path), settle_s=1.0, seen=[10], clock=clock)
    folder = tmp_path / "checkpoint-10"
    _write(folder, "state.json", "1")
    watcher.poll()
    clock.now = 2.0
    assert watcher.poll() == [10]
    watcher.handled(10)
    _write(folder, "state.json", "22")
    watcher.poll()
    clock.now = 4.0
    assert watcher.poll() == [10]
    assert watcher.verdict(10, signature(str(folder))).complete


# --- the libraries' own write orders, observed as they save -----------------------------------

# Runs a real save in a subprocess and prints, in order, every file it puts under the target:
# files the library opens for writing or renames into place (an audit hook sees them) and files
# written by torch.save or safetensors' save_file (a profile hook sees those calls return).
_RECORD_SAVE = """
import json, os, sys, threading
target = os.path.abspath(sys.argv[2])
events = []
def inside(path):
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(target)
def add(path):
    if inside(path) and ["add", os.path.relpath(path, target)] not in events:
        events.append(["add", os.path.relpath(path, target)])
def audit(event, args):
    if event == "open" and inside(args[0]):
        if (args[1] and any(c in args[1] for c in "wax+")) or (
            args[1] is None and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
            add(args[0])
    elif event == "os.rename" and inside(args[1]):
        events.append(["move", os.path.relpath(args[0], target), os.path.relpath(args[1], target)])
def profile(frame, event, arg):
    code = frame.f_code
    if event == "return" and code.co_name == "save" and code.co_filename.endswith(
            os.path.join("torch", "serialization.py")):
        add(frame.f_locals.get("f"))
    elif event == "return" and code.co_name == "save_file" and "safetensors" in code.co_filename:
        add(frame.f_locals.get("filename"))
import torch
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.AdamW(model.parameters())
sys.addaudithook(audit)
sys.setprofile(profile)
threading.setprofile(profile)
if sys.argv[1] == "trainer":
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8)
    data = Dataset.from_dict({"input_ids": [[1, 2, 3, 4]] * 2, "labels": [[1, 2, 3, 4]] * 2})
    args = TrainingArguments(output_dir=os.path.dirname(target), max_steps=1, save_steps=1,
                             report_to=[], use_cpu=True, disable_tqdm=True)
    Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data).train()
elif sys.argv[1] == "accelerate":
    from accelerate import Accelerator
    accelerator = Accelerator(cpu=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.save_state(target)
else:
    import warnings
    import torch.distributed.checkpoint as dcp
    warnings.simplefilter("ignore")
    dcp.save({"model": model.state_dict(), "optim": optimizer.state_dict()}, checkpoint_id=target)
sys.setprofile(None)
print(json.dumps(events))
"""


@pytest.mark.slow  # a real Trainer, Accelerate and DCP save in a process of their own
@pytest.mark.hf
@pytest.mark.parametrize("library", ["trainer", "accelerate", "dcp"])
def test_a_real_save_is_incomplete_until_its_last_file_lands(tmp_path, library):
    pytest.importorskip("accelerate")
    target = tmp_path / "checkpoint-1"  # where the Trainer saves its one step
    proc = subprocess.run(
        [sys.executable, "-c", _RECORD_SAVE, library, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    events = json.loads(proc.stdout.splitlines()[-1])
    assert len(events) >= 2, events
    present: list[str] = []
    seen_while_saving, expected = [], []
    written = [event[-1] for event in events]
    for event in events:
        if event[0] == "move":
            present.remove(event[1])
        present.append(event[-1])
        seen_while_saving.append(judge(present).complete)
        expected.append(_model_then_arguments(present, written))
    final = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert set(present) <= set(final)  # (weights written outside Python are not observed)
    assert seen_while_saving[:-1] == expected[:-1]
    assert judge(final).complete
