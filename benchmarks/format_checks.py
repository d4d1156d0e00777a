"""What the format checks add to a directory-contract capture: their time against the capture's.

    .venv/bin/python benchmarks/format_checks.py [--mib 256] [--files 4] [--rounds 7]
                                                  [--dir SCRATCH]

Builds a checkpoint folder the way programs write one: FILES ``torch.save`` archives (a state
dict of float32 tensors), one ``.safetensors`` file and a pickle, MIB in all, in the page cache
(a checkpoint the program has just written). Each round, in alternating order:

- the capture of the folder into a fresh ``file://`` store (hash, copy, fsync, manifest), as
  the runner's capture loop makes it;
- the checks the capture loop runs first on every file (``nodus.stages.formats.torn``: a zip
  archive's end records, a safetensors header, a pickle's last byte);
- the proof of wholeness a capture after a death by signal asks of each file
  (``formats.whole``: every zip member's local header where the directory says, a safetensors
  file's last tensor ending at the file's end, a pickle's opcodes up to its STOP);
- the step read from inside each ``torch.save`` archive (``nodus.stages.recorded_steps.read``:
  the pickle's opcodes walked, no tensor loaded), against ``torch.load(mmap=True,
  weights_only=True)``, the obvious way to read it.

Reports the medians and their ratios; targets: the checks and the proof each cost at most 5% of
the capture, and the step read costs less than ``torch.load``'s.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from nodus.stages import formats, recorded_steps
from nodus.store import SnapshotInfo, open_store


def make_checkpoint(folder: str, mib: int, count: int) -> list[str]:
    import torch
    from safetensors.torch import save_file

    os.makedirs(folder)
    floats = mib * 2**20 // 4 // (count + 1)
    for index in range(count):
        state = {f"layer{i}": torch.randn(floats // 8) for i in range(8)}
        state["iter_num"] = 100 + index
        torch.save(state, os.path.join(folder, f"shard-{index}.pt"))
    save_file({"weight": torch.randn(floats)}, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "progress.pkl"), "wb") as handle:
        pickle.dump({"step": 100, "history": list(range(10_000))}, handle)
    subprocess.run(["sync"], check=True)
    return sorted(os.listdir(folder))


def time_capture(folder: str, scratch: str, round_: int) -> float:
    store_dir = os.path.join(scratch, f"store-{round_}")
    store = open_store("file://" + store_dir)
    info = SnapshotInfo(run="run_bench", stage="main", attempt=1, step=round_, role="checkpoint")
    started = time.perf_counter()
    store.capture(os.path.dirname(folder), [os.path.basename(folder)], info=info)
    elapsed = time.perf_counter() - started
    shutil.rmtree(store_dir)
    return elapsed


def time_checks(folder: str, names: list[str]) -> float:
    started = time.perf_counter()
    for name in names:
        assert formats.torn(os.path.join(folder, name), name) is None, name
    return time.perf_counter() - started


def time_proofs(folder: str, names: list[str]) -> float:
    started = time.perf_counter()
    for name in names:
        assert formats.whole(os.path.join(folder, name), name), name
    return time.perf_counter() - started


def time_steps(folder: str, names: list[str], load: bool) -> float:
    import torch

    archives = [os.path.join(folder, name) for name in names if name.endswith(".pt")]
    started = time.perf_counter()
    for path in archives:
        if load:
            step = torch.load(path, mmap=True, weights_only=True)["iter_num"]
        else:
            recorded = recorded_steps.read(path)
            step = recorded.step if recorded else None
        assert isinstance(step, int), path
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="nodus-format-bench-", dir=args.dir)
    try:
        folder = os.path.join(scratch, "copy", "state")
        names = make_checkpoint(folder, args.mib, args.files)
        captures, checks, proofs, reads, loads = [], [], [], [], []
        for round_ in range(args.rounds):
            measures = [
                lambda r=round_: captures.append(time_capture(folder, scratch, r)),
                lambda: checks.append(time_checks(folder, names)),
                lambda: proofs.append(time_proofs(folder, names)),
                lambda: reads.append(time_steps(folder, names, load=False)),
                lambda: loads.append(time_steps(folder, names, load=True)),
            ]
            for measure in measures if round_ % 2 else reversed(measures):
                measure()
        capture, check = statistics.median(captures), statistics.median(checks)
        proof, read, load = (statistics.median(x) for x in (proofs, reads, loads))
        print(f"checkpoint: {len(names)} files, {args.mib} MiB; {args.rounds} rounds")
        print(f"capture (median): {capture * 1000:.1f} ms")
        print(f"format checks (median): {check * 1000:.3f} ms")
        print(f"checks / capture: {check / capture:.4%} (target <= 5%)")
        print(f"proof of wholeness (median): {proof * 1000:.3f} ms")
        print(f"proof / capture: {proof / capture:.4%} (target <= 5%)")
        print(f"step read inside {args.files} archives (median): {read * 1000:.3f} ms")
        print(f"torch.load(mmap=True) of the same (median): {load * 1000:.3f} ms")
        print(f"step read / torch.load: {read / load:.3f}x (target < 1)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
