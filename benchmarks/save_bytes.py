"""Bytes written to disk per save: a bare ``Trainer`` save vs an hf-trainer-v1 save and its capture.

    .venv/bin/python benchmarks/save_bytes.py [--width 128] [--layers 4] [--saves 3] [--dir SCRATCH]

One process, GPT-2 (vocabulary 50257, N_EMBD=WIDTH, LAYERS layers) after two training steps so
the optimizer state exists. Each save is counted by this process's ``write_bytes`` in
``/proc/self/io`` (bytes it caused to be written to storage, page-cache writes included):

- bare: ``Trainer._save_checkpoint`` (the checkpoint's size, written once);
- nodus: the integration's writer (``CheckpointWriter``: the checkpoint folder, published by
  rename, its save record) and then the runner's capture loop (``Capturer``, a real catalog and
  a ``file://`` store on the same disk) capturing it from the save record, as under `nodus run`.

Reported: bytes written per save over the checkpoint's size (target <= 1.1x; twice the size when
the capture writes a second copy). Medians of SAVES saves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))


def written() -> int:
    with open("/proc/self/io", encoding="ascii") as handle:
        fields = dict(line.split(": ") for line in handle.read().splitlines())
    return int(fields["write_bytes"])


def build_trainer(output_dir: str, width: int, layers: int):
    import torch
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

    set_seed(0)
    config = GPT2Config(vocab_size=50257, n_positions=64, n_embd=width, n_layer=layers, n_head=4)
    ids = torch.randint(0, 50257, (16, 32), generator=torch.Generator().manual_seed(0)).tolist()
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=2,
        per_device_train_batch_size=2,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    return Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data)


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))


def nodus_side(work: str, trainer, saves: int) -> list[int]:
    from nodus.runner.capture.capturer import Capturer
    from nodus.runner.catalog.attempt_context import AttemptContext
    from nodus.runner.catalog.core import Catalog
    from nodus.runner.workspace.layout import Workspace
    from nodus.schemas.resolved import ResolvedContinuity, ResolvedExecution, ResolvedStage
    from nodus.stages.hf.inprocess.channel import ControlDir
    from nodus.stages.hf.inprocess.state_copy import Buffers, capture
    from nodus.stages.hf.inprocess.writer import CheckpointWriter
    from nodus.store import open_store

    catalog = Catalog(os.path.join(work, "home"))
    run_id = catalog.create_run(
        name="w", workload={}, store="", key=None, lock_name="l", stage_names=["main"]
    )
    ws = Workspace(os.path.join(work, "attempt"))
    ws.make_private_folders()
    stage = ResolvedStage(
        name="main",
        command=("true",),
        code="/",
        env={},
        outputs=(),
        integration="hf-trainer-v1",
        continuity=ResolvedContinuity("checkpointed", True, ("state",)),
        execution=ResolvedExecution(10, False, 1, 3, 10, 5.0, 7),
    )
    store = open_store("file://" + os.path.join(work, "store"))
    number = catalog.start_attempt(run_id, "main")
    capturer = Capturer(AttemptContext(store, catalog, run_id, stage, number), ws)
    writer = CheckpointWriter(ControlDir(ws.private, ws.state), trainer, lambda step: None)
    buffers = Buffers()
    counts = []
    for index in range(saves):
        trainer.state.global_step = 1000 + index  # a new folder each time
        before = written()
        writer.submit(capture(trainer, {}, [], buffers))
        writer.wait()
        capturer.capture_save_records()
        counts.append(written() - before)
    committed = [e for e in catalog.events(run_id) if e["type"] == "snapshot_committed"]
    assert len(committed) == saves, "a save was not committed"
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="nodus-save-bytes-", dir=args.dir)
    try:
        trainer = build_trainer(os.path.join(work, "bare"), args.width, args.layers)
        trainer.train()
        bare = []
        for index in range(args.saves):
            trainer.state.global_step = 100 + index
            before = written()
            trainer._save_checkpoint(trainer.model, None)
            bare.append(written() - before)
        size = folder_bytes(os.path.join(work, "bare", f"checkpoint-{100 + args.saves - 1}"))
        ours = nodus_side(work, trainer, args.saves)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "checkpoint_bytes": size,
        "bare_written_per_save": int(statistics.median(bare)),
        "nodus_written_per_save": int(statistics.median(ours)),
        "bare_ratio": round(statistics.median(bare) / size, 3),
        "nodus_ratio": round(statistics.median(ours) / size, 3),
        "nodus_rounds": ours,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
