"""Point 1: the dataset identity means the data, not where it was read from.

Each case loads real local files with `datasets` (its own cache folder per load, as attempts on
two machines would), transforms them the way training scripts do, and compares identities:
the same bytes at another path with another mtime are the same data (``datasets``' fingerprint
says otherwise, which is what broke recoveries), one changed byte is not.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nodus.stages.hf.inprocess.identity import dataset_identity, differences
from scheduling import ML_IN_PROCESS

pytestmark = pytest.mark.hf


@pytest.fixture(autouse=True)
def _datasets_installed():
    """Skipped without `datasets`; imported where used, so collecting does not import it."""
    pytest.importorskip("datasets")


LINES = [
    "short" if i % 10 == 9 else f"line {i} says the quick brown fox number {i % 7} jumps"
    for i in range(60)
]
FIRST_CHANGE = ("line 17 says", "line 17 sayz")  # one byte of a row the selection keeps


def _write(folder: Path, kind: str) -> Path:
    """The data file(s) of ``kind`` in ``folder``; what a changed byte is changed in."""
    import datasets

    folder.mkdir(parents=True)
    if kind == "text":
        path = folder / "train.txt"
        path.write_text("\n".join(LINES) + "\n")
    elif kind == "json":
        path = folder / "train.jsonl"
        path.write_text("".join(json.dumps({"text": line}) + "\n" for line in LINES))
    elif kind == "csv":
        path = folder / "train.csv"
        path.write_text("text\n" + "".join(f"{line}\n" for line in LINES))
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / "train.parquet"  # plain pages, so a byte can be changed in place
        table = pa.table({"text": LINES})
        pq.write_table(table, path, compression="none", use_dictionary=False)
    else:  # load_from_disk
        path = folder / "saved"
        datasets.Dataset.from_dict({"text": LINES}).save_to_disk(str(path))
    return path


def _load(path: Path, kind: str, cache: Path):
    import datasets

    if kind == "load_from_disk":
        return datasets.load_from_disk(str(path))
    builder = {"text": "text", "json": "json", "csv": "csv", "parquet": "parquet"}[kind]
    return datasets.load_dataset(builder, data_files={"train": str(path)}, cache_dir=str(cache))[
        "train"
    ]


def _train_dataset(path: Path, kind: str, cache: Path):
    """Loaded, then map / filter / select / shuffle(seed), as training scripts prepare data."""
    data = _load(path, kind, cache)
    data = data.map(
        lambda batch: {"ids": [[ord(c) % 50 for c in text] for text in batch["text"]]},
        batched=True,
        remove_columns=["text"],
    )
    data = data.filter(lambda row: len(row["ids"]) > 10)  # the six short lines go
    return data.select(range(40)).shuffle(seed=7)


def _change_one_byte(path: Path, kind: str) -> None:
    import datasets

    old, new = FIRST_CHANGE
    if kind == "load_from_disk":  # saved again, as a changed dataset is (not patched in place)
        shutil.rmtree(path)
        lines = [line.replace(old, new) for line in LINES]
        datasets.Dataset.from_dict({"text": lines}).save_to_disk(str(path))
        return
    raw = path.read_bytes()
    assert old.encode() in raw
    path.write_bytes(raw.replace(old.encode(), new.encode(), 1))


def _copy(source: Path, target: Path) -> None:
    """Another path, and new mtimes (no metadata kept): what a new working copy used to be."""
    if source.is_dir():
        shutil.copytree(source, target, copy_function=shutil.copyfile)
    else:
        target.parent.mkdir(parents=True)
        shutil.copyfile(source, target)


@ML_IN_PROCESS
@pytest.mark.parametrize("kind", ["text", "json", "csv", "parquet", "load_from_disk"])
def test_same_bytes_elsewhere_are_the_same_dataset_and_one_changed_byte_is_not(tmp_path, kind):
    first = _write(tmp_path / "attempt-1", kind)
    saved = dataset_identity(_train_dataset(first, kind, tmp_path / "cache-1"))
    second = tmp_path / "attempt-2" / first.name
    _copy(first, second)
    moved = dataset_identity(_train_dataset(second, kind, tmp_path / "cache-2"))

    assert moved["dataset"] == saved["dataset"]
    assert saved["dataset"].endswith("(40 rows)")
    assert differences(saved, moved) == []
    if kind != "load_from_disk":  # what the fingerprint alone would have refused
        assert moved["dataset_fingerprint"] != saved["dataset_fingerprint"]

    _change_one_byte(second, kind)
    changed = dataset_identity(_train_dataset(second, kind, tmp_path / "cache-3"))
    assert changed["dataset"] != saved["dataset"]
    (line,) = differences(saved, changed)
    assert line.startswith("train dataset content differs (")
    if kind != "load_from_disk":
        assert str(second) in line  # the refusal names the data file


@ML_IN_PROCESS
def test_another_shuffle_or_selection_is_another_dataset(tmp_path):
    path = _write(tmp_path / "data", "text")
    data = _train_dataset(path, "text", tmp_path / "cache")
    base = dataset_identity(data)["dataset"]
    assert dataset_identity(data.shuffle(seed=8))["dataset"] != base
    assert dataset_identity(data.select(range(39)))["dataset"] != base
    assert dataset_identity(data.select(range(40)))["dataset"] == base


def _rows_without_none(batch):
    """A format transform as TRL's DPOTrainer sets one (``remove_none_values``)."""
    return {k: [v for v in values if v is not None] for k, values in batch.items()}


_IDENTITY_IN_A_PROCESS = """
import datasets, functools, json, os, sys
sys.path[:0] = [sys.argv[2], os.path.dirname(sys.argv[2])]  # tests/hf, and tests/ (scheduling)
from test_dataset_identity import _rows_without_none
from nodus.stages.hf.inprocess.identity import dataset_identity
data = datasets.load_from_disk(sys.argv[1]).with_transform(_rows_without_none)
print(json.dumps(dataset_identity(data)))
"""


@pytest.mark.slow  # two fresh processes importing the Transformers stack
def test_a_format_transform_is_named_not_by_its_address_in_every_process(tmp_path):
    """The format's ``transform`` (a function) was hashed by its ``repr``, which holds its memory
    address: every attempt of a managed dpo run read other content for unchanged data and every
    recovery was refused. A function is its module and name, in every process."""
    import subprocess
    import sys

    import datasets

    path = _write(tmp_path / "data", "load_from_disk")
    here = dataset_identity(datasets.load_from_disk(str(path)).with_transform(_rows_without_none))
    there = json.loads(
        subprocess.run(
            [sys.executable, "-c", _IDENTITY_IN_A_PROCESS, str(path), str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert differences(there, here) == []
    plain = dataset_identity(datasets.load_from_disk(str(path)))
    assert plain["dataset"] != here["dataset"]  # a format that changes the rows is part of them
