"""A store is input: a hostile store never reaches outside its root or the target folder.

Real ``file://`` stores are built by capturing real folders, then their manifests, run records
and blobs are mutated as an attacker (or a careless user) would, and every operation a command
runs on a store is carried out in-process through the library the CLI calls: listing, restore,
download, verify, gc and deletion. Each may refuse (a ``NodusError``: damage, an unsafe path,
a usage error) but never fail otherwise, and nothing outside the store and the targets is
created, changed or deleted (a listing with hashes of the surroundings, before and after).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from nodus.errors import NodusError, SnapshotDamagedError, StoreError, UnsafePathError
from nodus.inventory.download import download_snapshot, download_weights
from nodus.retention.holds import HoldIndex, run_holds
from nodus.store import SnapshotInfo, keys, open_store
from nodus.store._io import copy_hashing
from nodus.store.model_records import ModelVersion
from nodus.store.run_records import RunRecords

from .trees import write_tree

RUN = "run_0123456789ab"
VICTIM = b"the victim's own bytes\n"
CHECKPOINT = {
    "state/checkpoint-5/model.safetensors": b"weights" * 10,
    "state/checkpoint-5/config.json": b'{"a": 1}',
    "state/checkpoint-5/optimizer.pt": b"optimizer" * 7,
    "state/checkpoint-5/trainer_state.json": b'{"global_step": 5}',
    "state/checkpoint-5/notes/readme.txt": b"notes",
}


def _info(step: int) -> SnapshotInfo:
    return SnapshotInfo(run=RUN, stage="main", attempt=1, step=step, metrics={"loss": 1.5})


def _record() -> dict:
    attempt = {
        "number": 1,
        "outcome": None,
        "detail": None,
        "restored_snapshot": None,
        "restored_step": None,
        "pid": 42,
        "host": "h",
        "devices": 1,
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": None,
    }
    stage = {
        "idx": 0,
        "name": "main",
        "phase": "RUNNING",
        "source_snapshot": None,
        "recoveries": 0,
        "attempts": [attempt],
    }
    return {
        "id": RUN,
        "key": None,
        "name": "counter",
        "workload": {"name": "counter"},
        "launch": None,
        "store": "file:///x",
        "phase": "RUNNING",
        "exit_status": None,
        "message": None,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "finished_at": None,
        "stages": [stage],
        "driver": None,
    }


def _template(folder: Path) -> tuple[Path, list[str]]:
    """A real store: two checkpoints and the outputs captured from a live folder, a link, a run
    record."""
    live = folder / "live"
    write_tree(live, CHECKPOINT)
    os.symlink("trainer_state.json", live / "state/checkpoint-5/latest.json")
    os.symlink("notes", live / "state/checkpoint-5/notes-link")
    store = open_store("file://" + str(folder / "store"))
    first = store.capture(str(live), ["state"], info=_info(5))
    write_tree(live, {"state/checkpoint-5/optimizer.pt": b"optimizer, later" * 5})
    second = store.capture(str(live), ["state"], info=_info(6))
    # The run's outputs: the same folder, so every one of its blobs is a checkpoint's too.
    outputs_info = SnapshotInfo(run=RUN, stage="main", attempt=1, step=None, role="outputs")
    outputs = store.capture(str(live), ["state"], info=outputs_info)
    RunRecords(store.storage).write(_record())
    store.hold_records.write(second.id, "pin", {"kinds": ["weights"], "at": 1.0, "by": "me"})
    weights = tuple(e for e in second.files if e.kind == "weights")
    store.add_model_version(
        ModelVersion("tiny", 1, RUN, second.id, "main", 6, None, "manual", 1.0, weights)
    )
    store.storage.write(
        keys.tombstone_key(first.id, "files"),
        json.dumps({"state": "deleted", "reason": "rotation", "at": 1.0}).encode(),
    )
    shutil.rmtree(live)
    store.restore(second.id, str(folder / "previous"))  # a working copy set aside, to reuse
    return folder / "store", [first.id, second.id, outputs.id]


# --- the surroundings ------------------------------------------------------------------------


def _world(root: Path) -> None:
    """What lies around the store and the targets: what an attack would reach for."""
    write_tree(
        root, {"outside/victim.txt": VICTIM, "outside/dir/keep.txt": b"keep", "w.toml": b"w"}
    )


def _listing(root: Path, skip: tuple[str, ...]) -> dict[str, tuple]:
    """Every path under ``root`` but those under ``skip`` (relative): kind, mode, contents."""
    found: dict[str, tuple] = {}
    for folder, dirs, names in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel_folder, d)) not in skip]
        for name in dirs + names:
            full = os.path.join(folder, name)
            rel = os.path.normpath(os.path.join(rel_folder, name))
            if rel in skip:
                continue
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(Path(full).read_bytes()).hexdigest()
                found[rel] = ("file", stat.S_IMODE(info.st_mode), digest, info.st_mtime_ns)
            else:
                found[rel] = ("other", stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode))
    return found


def _links_stay_inside(target: Path) -> list[str]:
    """Links under ``target`` that resolve out of it (none may)."""
    root = os.path.realpath(target)
    out = []
    for folder, dirs, names in os.walk(target):
        for name in dirs + names:
            full = os.path.join(folder, name)
            if os.path.islink(full):
                real = os.path.realpath(full)
                if real != root and not real.startswith(root + os.sep):
                    out.append(f"{full} -> {os.readlink(full)} ({real})")
    return out


# --- the mutations -----------------------------------------------------------------------------

HOSTILE = [
    None,
    True,
    -1,
    0,
    1.5,
    10**30,
    -(10**30),
    2**63,
    "ten",
    "",
    [],
    {},
    [1, 2],
    {"a": 1},
    "../../../outside/victim.txt",
    "/dev/zero",
    "/etc/passwd",
    float("nan"),
]
BAD_HASHES = [
    "../../../outside/victim.txt",
    "../../outside/victim.txt",
    "/dev/zero",
    "/proc/self/environ",
    "..",
    "",
    "A" * 32,
    "0" * 31,
    "0" * 33,
    "0" * 32 + "\n",
    "ab/../../../../outside/victim.txt",
]
BAD_PATHS = [
    "../escape.txt",
    "/abs/escape.txt",
    "state/../../escape.txt",
    "state\\checkpoint-5\\x",
    "",
    ".",
    "state//x",
    "state/./x",
    "state/checkpoint-5/a\x00b",
    "../../outside/victim.txt",
]
BAD_TARGETS = ["../../outside", "../../../outside/victim.txt", "/etc", "/", "", ".."]
MODES = [0o6777, 0o4755, 0o2755, 0o1777, 0o7777, 10**30, -1, "644", 1.0, None, 0o10000]
SIZES = [-1, 10**30, 2**63, 0, 10**9, "5", 1.5, None, True]


def _mutate_manifest(data: dict, rng: random.Random) -> str:
    """One hostile change to a manifest (in place); the description says which."""
    if not isinstance(data.get("files"), list) or not all(
        isinstance(f, dict) for f in data["files"]
    ):
        data["files"] = [
            {"path": "state/x", "size": 1, "mode": 0o644, "hash": "ab" * 16, "kind": "files"}
        ]
    files = data["files"]
    entry = rng.choice(files)
    field = rng.choice(["path", "size", "mode", "hash", "kind", "target", "mtime_ns"])
    choice = rng.randrange(len(_MUTATIONS) + 1)
    told = _MUTATIONS[choice](data, entry, field, rng) if choice < len(_MUTATIONS) else None
    if told is not None:
        return told
    data["files"] = rng.choice([None, "x", {}, [None], [[]], files * 2])
    return f"files = {type(data['files']).__name__}"


def _remove_field(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    name = rng.choice(sorted(data))
    del data[name]
    return f"removed {name}"


def _hostile_field(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    name = rng.choice(sorted(data))
    data[name] = rng.choice(HOSTILE)
    return f"{name} = {data[name]!r}"


def _remove_entry_field(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    entry.pop(field, None)
    return f"removed {field} of {entry.get('path')!r}"


def _hostile_entry_field(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    entry[field] = rng.choice(HOSTILE)
    return f"{field} of an entry = {entry[field]!r}"


def _bad_hash(data: dict, entry: dict, field: str, rng: random.Random) -> str | None:
    if "target" in entry:
        return None  # a link has no hash to spoil: the files themselves change instead
    entry["hash"] = rng.choice(BAD_HASHES)
    return f"hash = {entry['hash']!r}"


def _bad_path(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    entry["path"] = rng.choice([*BAD_PATHS, data["files"][0]["path"]])
    return f"path = {entry['path']!r}"


def _bad_mode(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    entry["mode"] = rng.choice(MODES)
    return f"mode = {entry['mode']!r}"


def _bad_size(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    entry["size"] = rng.choice(SIZES)
    return f"size = {entry['size']!r}"


def _bad_step(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    data["step"] = rng.choice(["ten", "5", 5.5, -3, 10**30, None, True, [5]])
    return f"step = {data['step']!r}"


def _link_out(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    files = data["files"]
    files.append(
        {
            **entry,
            "path": "state/checkpoint-5/escape",
            "target": rng.choice(BAD_TARGETS),
            "hash": "",
        }
    )
    return f"link to {files[-1]['target']!r}"


def _chained_links(data: dict, entry: dict, field: str, rng: random.Random) -> str:
    return _chain(data["files"], rng)


# The mutations, drawn uniformly with one more: replacing the whole file list (the last resort
# of a mutation that does not apply to the entry drawn, too).
_MUTATIONS = [
    _remove_field,
    _hostile_field,
    _remove_entry_field,
    _hostile_entry_field,
    _bad_hash,
    _bad_path,
    _bad_mode,
    _bad_size,
    _bad_step,
    _link_out,
    _chained_links,
]


def _chain(files: list[dict], rng: random.Random) -> str:
    """Two links that each stay inside when read alone, and lead out together."""
    base = "state/checkpoint-5/notes"
    up = rng.randint(1, 4)
    link = {"size": 0, "mode": 0o777, "hash": "", "kind": "files"}
    files.append({**link, "path": f"{base}/b", "target": "../../.."})  # the snapshot's root
    files.append({**link, "path": f"{base}/a", "target": "b/" + "../" * up + "outside/victim.txt"})
    if rng.random() < 0.5:
        files.append({**link, "path": f"{base}/c", "target": "a"})  # a longer chain
    return f"chain of links, {up} up"


def _mutate_record(data: dict, rng: random.Random) -> str:
    choice = rng.randrange(5)
    stage = data["stages"][0]
    attempt = stage["attempts"][0]
    where = rng.choice([data, stage, attempt])
    name = rng.choice(sorted(where))
    if choice == 0:
        del where[name]
        return f"record: removed {name}"
    if choice == 1:
        where[name] = rng.choice(HOSTILE)
        return f"record: {name} = {where[name]!r}"
    if choice == 2:
        attempt["number"] = rng.choice(["ten", None, 1.5, -1, 10**30, True])
        return f"record: attempt number = {attempt['number']!r}"
    if choice == 3:
        data["id"] = rng.choice(["run_ffffffffffff", "../../outside", 5])
        return f"record: id = {data['id']!r}"
    data["stages"] = rng.choice([None, "x", [None], [{}], {}])
    return f"record: stages = {data['stages']!r}"


def _mutate_blob(store: Path, world: Path, rng: random.Random) -> str:
    blobs = sorted(p for p in (store / "blobs").rglob("*") if p.is_file())
    blob = rng.choice(blobs)
    choice = rng.randrange(5)
    os.chmod(blob, 0o644)
    blob.unlink()
    if choice == 0:
        os.symlink(world / "outside/victim.txt", blob)
        return "blob is a link to the victim"
    if choice == 1:
        os.symlink("/dev/zero", blob)
        return "blob is a link to /dev/zero"
    if choice == 2:
        blob.write_bytes(os.urandom(rng.randint(0, 300)))
        return "blob altered"
    if choice == 3:
        os.mkfifo(blob)
        return "blob is a FIFO"
    return "blob missing"


def _raw_garbage(rng: random.Random) -> bytes:
    return rng.choice([b"", b"{", b"[" * 100_000, b"\xff\xfe", b"null", b"[]", b'"x"', b"1e999"])


def _mutate_small_record(store: Path, ids: list[str], rng: random.Random) -> str:
    """A hold, a tombstone or a model-version record, retyped or garbage."""
    key = rng.choice(
        [
            keys.hold_key(ids[1], "pin"),
            keys.tombstone_key(ids[0], "files"),
            keys.model_version_key("tiny", 1),
            keys.model_aliases_key("tiny"),
        ]
    )
    if rng.random() < 0.2:
        (store / key).write_bytes(_raw_garbage(rng))
        return f"{key}: garbage bytes"
    path = store / key
    data = json.loads(path.read_bytes()) if path.exists() else {"aliases": {"best": 1}}
    if "files" in data and rng.random() < 0.5:
        told = _mutate_manifest(data, rng)
    else:
        name = rng.choice([*sorted(data), "kinds", "state", "aliases"])
        data[name] = rng.choice([*HOSTILE, {"best": "x"}, ["bogus"], "deleted"])
        told = f"{name} = {data[name]!r}"
    path.write_bytes(json.dumps(data).encode())
    return f"{key}: {told}"


def _mutate(store: Path, world: Path, ids: list[str], rng: random.Random) -> str:
    what = rng.random()
    if what < 0.1:
        return _mutate_blob(store, world, rng)
    if what < 0.2:
        return _mutate_small_record(store, ids, rng)
    if what < 0.35:
        key = store / keys.run_record_key(RUN)
        if rng.random() < 0.15:
            key.write_bytes(_raw_garbage(rng))
            return "record: garbage bytes"
        data = json.loads(key.read_bytes())
        told = _mutate_record(data, rng)
    else:
        key = store / keys.manifest_key(rng.choice(ids))
        if rng.random() < 0.05:
            key.write_bytes(_raw_garbage(rng))
            return "manifest: garbage bytes"
        data = json.loads(key.read_bytes())
        told = "; ".join(_mutate_manifest(data, rng) for _ in range(rng.choice([1, 1, 1, 2, 3])))
    key.write_bytes(json.dumps(data).encode())
    return told


# --- the operations ----------------------------------------------------------------------------


def _operate(case: Path, ids: list[str], refused: list[str]) -> list[str]:
    """What the commands do to a store, in-process; the problems found (none expected).
    ``refused`` gains the type of each refusal, which shows what the mutations reach."""
    outcomes = _Outcomes(refused)
    attempt, problems = outcomes.attempt, outcomes.problems
    store = open_store("file://" + str(case / "store"))
    listed = attempt("list", lambda: store.list(role=None)) or []
    for manifest in listed:
        attempt("bytes", lambda m=manifest: (m.total_bytes, m.kinds, m.to_dict()))
    damaged = _restore_each(case, store, ids, outcomes)
    attempt("record", lambda: RunRecords(store.storage).read(RUN))
    attempt("holds", lambda: run_holds(None, store.list(), HoldIndex(store), {}))
    attempt("deletions", lambda: [store.deletions(s) for s in ids])
    attempt("aliases", lambda: store.model_records.aliases("tiny"))
    version = attempt("model", lambda: store.model_records.read("tiny", 1))
    if version is not None:
        to = case / "dl" / "model"
        attempt(
            "model download", lambda: download_weights(store, version.as_manifest(), "m", str(to))
        )
        problems += [f"downloaded link out: {link}" for link in _links_stay_inside(to)]
    report = attempt("verify", lambda: open_store(store.url).verify())
    if report is not None:
        missed = damaged - set(report.damaged)
        if missed:
            problems.append(f"verify calls {sorted(missed)} sound, restores call them damaged")
    _delete_all(store, ids, outcomes)
    return problems


class _Outcomes:
    """Each operation's outcome: a refusal (a NodusError) is expected and recorded in
    ``refused``; any other exception is a problem."""

    def __init__(self, refused: list[str]) -> None:
        self.refused = refused
        self.problems: list[str] = []

    def attempt(self, what: str, work) -> Any:
        try:
            return work()
        except NodusError as error:
            self.refused.append(f"{what}: {type(error).__name__}")
            return None
        except Exception as error:
            self.problems.append(f"{what}: {type(error).__name__}: {error}")
            return None


def _restore_each(case: Path, store, ids: list[str], outcomes: _Outcomes) -> set[str]:
    """Restore (plain, then reusing a previous copy) and download each snapshot; the ids the
    restore calls damaged."""
    problems, refused = outcomes.problems, outcomes.refused
    damaged = set()
    for index, snapshot_id in enumerate(ids):
        target = case / "target" / str(index)
        try:
            store.restore(snapshot_id, str(target))
        except SnapshotDamagedError:
            damaged.add(snapshot_id)
            refused.append("restore: SnapshotDamagedError")
        except NodusError as error:
            refused.append(f"restore: {type(error).__name__}")
        except Exception as error:
            problems.append(f"restore: {type(error).__name__}: {error}")
        problems += [f"restored link out: {link}" for link in _links_stay_inside(target)]
        # The runner's restore: files of the copy set aside moved in, blobs linked.
        again = case / "target" / f"reused-{index}"
        shutil.copytree(case.parent / "previous", case / "previous", dirs_exist_ok=True)
        outcomes.attempt(
            "restore reusing",
            lambda s=snapshot_id, t=again: store.restore(
                s, str(t), reuse=str(case / "previous"), link=("state/checkpoint-5",)
            ),
        )
        problems += [f"restored link out: {link}" for link in _links_stay_inside(again)]
        manifest = outcomes.attempt("get", lambda s=snapshot_id: store.get(s))
        if manifest is not None:
            dl = case / "dl" / str(index)
            outcomes.attempt(
                "download",
                lambda m=manifest, d=dl: download_snapshot(store, m, "resumable", str(d)),
            )
            problems += [f"downloaded link out: {link}" for link in _links_stay_inside(dl)]
    return damaged


def _delete_all(store, ids: list[str], outcomes: _Outcomes) -> None:
    """Finish deletions, collect, rotate, delete everything: a deletion never frees a blob a
    live record still names."""
    attempt = outcomes.attempt
    named = attempt("named", lambda: _named_blobs(store.url))
    attempt("finish", store.finish_deletions)
    attempt("gc", lambda: store.gc_blobs(grace_s=0.0))
    attempt("rotation", lambda: store.delete_kind(ids[0], "state"))
    still = attempt("named after", lambda: _named_blobs(store.url))
    if named is not None and still is not None:
        # Whatever the store holds, a deletion never frees a blob a live record still names.
        lost = (named[0] & still[1]) - still[0]
        if lost:
            outcomes.problems.append(
                f"blobs still named by a live record were freed: {sorted(lost)}"
            )
    for snapshot_id in ids:
        attempt("delete", lambda s=snapshot_id: store.delete(s))
    attempt("runs delete", lambda: RunRecords(store.storage).delete(RUN, None))
    attempt("repair", lambda: open_store(store.url).verify(repair=True))


def _named_blobs(url: str) -> tuple[set[str], set[str]]:
    """The blobs that live records (snapshots of any role, model versions) name and that are
    stored; and all they name."""
    store = open_store(url)
    named = {e.hash for m in store.list(role=None) for e in m.held_files() if not e.is_link}
    named |= {digest for version in store.model_records.list() for digest in version.blobs}
    stored = {digest for digest in named if store.storage.exists(keys.blob_key(digest))}
    return stored, named


MUTATIONS = 1000


@pytest.fixture
def sandbox(tmp_path):
    """A folder on a tmpfs where this machine has one: the fuzzer looks for escapes, not for
    durability, and on a disk the stores' fsyncs would take most of its time."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="nodus-hostile-", dir="/dev/shm"))
    try:
        yield folder
    finally:
        _clear(folder)


@pytest.mark.slow  # a thousand stores, each opened and walked
def test_a_thousand_hostile_stores_never_reach_outside(sandbox):
    tmp_path = sandbox
    template, ids = _template(tmp_path / "template")
    world = tmp_path / "world"
    _world(world)
    shutil.copytree(tmp_path / "template" / "previous", world / "previous", symlinks=True)
    case = world / "case"
    skip = ("case/store", "case/target", "case/dl", "case/previous")
    failures, refused = [], []
    escapes = 0  # cases that aim out of the store: a link out, a chain of links, a bad path
    started = time.monotonic()
    for seed in range(MUTATIONS):
        rng = random.Random(seed)
        if case.exists():
            _clear(case)
        shutil.copytree(template, case / "store", symlinks=True)
        told = _mutate(case / "store", world, ids, rng)
        escapes += any(aim in told for aim in ("link to", "chain of links", "path = "))
        before = _listing(world, skip)
        problems = _operate(case, ids, refused)
        after = _listing(world, skip)
        if before != after:
            changed = sorted(
                k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
            )
            problems.append(f"outside the store and targets, changed: {changed}")
        if problems:
            failures.append(f"seed {seed} ({told}): {problems}")
    elapsed = time.monotonic() - started
    print(f"hostile-store fuzzer: {MUTATIONS} mutations in {elapsed:.1f}s")
    print("refusals:", dict(collections.Counter(refused).most_common()))
    assert refused.count("restore: SnapshotDamagedError") > MUTATIONS // 2  # they do reach
    # Not vacuous: "never outside" was tried by a tenth of the cases at least (about a quarter
    # aim out: most cases change a manifest, a quarter of those changes aim out).
    assert escapes > MUTATIONS // 10, escapes
    assert not failures, "\n".join(failures[:20])


def _clear(folder: Path) -> None:
    """Remove a case's folder, read-only blobs and all."""
    for path in folder.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            os.chmod(path, 0o755)
    shutil.rmtree(folder)


# --- each known attack, on its own -------------------------------------------------------------


def _store_with_victim(tmp_path: Path):
    world = tmp_path / "world"
    _world(world)
    template, ids = _template(tmp_path / "template")
    shutil.copytree(template, world / "store", symlinks=True)
    return world, open_store("file://" + str(world / "store")), ids


def _edit(store, snapshot_id: str, change) -> None:
    key = keys.manifest_key(snapshot_id)
    data = json.loads(store.storage.read(key))
    change(data)
    store.storage.write(key, json.dumps(data).encode())


def test_a_hash_that_is_a_path_deletes_nothing_outside(tmp_path):
    world, store, ids = _store_with_victim(tmp_path)
    victim = "../../../outside/victim.txt"

    def aim(data):
        data["files"][0]["hash"] = victim

    _edit(store, ids[0], aim)
    fresh = open_store(store.url)
    with pytest.raises(StoreError):
        fresh.gc_blobs(grace_s=0.0)  # a damaged manifest stops gc: never a sweep on a guess
    for work in (
        lambda: fresh.delete_kind(ids[0], "state"),  # rotation
        lambda: fresh.delete(ids[0]),  # runs delete, expiry
        lambda: fresh.restore(ids[0], str(world / "target")),
    ):
        with pytest.raises(SnapshotDamagedError):
            work()
    fresh.finish_deletions()  # passes over what it cannot read
    report = open_store(store.url).verify()
    assert ids[0] in report.damaged and not report.sound
    assert "hash" in report.damaged[ids[0]][0]
    assert (world / "outside/victim.txt").read_bytes() == VICTIM


def test_an_object_that_is_a_device_or_a_link_out_is_never_read(tmp_path):
    world, store, ids = _store_with_victim(tmp_path)
    manifest = store.get(ids[0])
    entry = next(e for e in manifest.files if not e.is_link)
    blob = Path(store.storage.local_file(keys.blob_key(entry.hash)))
    os.chmod(blob, 0o644)
    blob.unlink()
    os.symlink("/dev/zero", blob)
    # It ends (a read of /dev/zero never would: pytest's timeout stops a hang) and says so.
    report = open_store(store.url).verify()
    assert ids[0] in report.damaged
    with pytest.raises(SnapshotDamagedError):
        open_store(store.url).restore(ids[0], str(world / "target"))
    blob.unlink()
    os.symlink(world / "outside/victim.txt", blob)
    with pytest.raises(SnapshotDamagedError, match="missing"):
        open_store(store.url).read_file(manifest, entry.path)


def test_a_restore_reusing_a_copy_never_reads_through_a_blob_that_is_a_link(tmp_path):
    world, store, ids = _store_with_victim(tmp_path)
    manifest = store.get(ids[1])
    entry = next(e for e in manifest.files if e.path.endswith("config.json"))
    previous = world / "previous"
    store.restore(ids[1], str(previous))
    blob = Path(store.storage.local_file(keys.blob_key(entry.hash)))
    os.chmod(blob, 0o644)
    blob.unlink()
    os.symlink("/dev/zero", blob)
    with pytest.raises(SnapshotDamagedError):
        open_store(store.url).restore(ids[1], str(world / "target"), reuse=str(previous))


def test_a_copy_reads_at_most_one_byte_more_than_the_entry_holds(tmp_path):
    sink = tmp_path / "sink"
    with open("/dev/zero", "rb", buffering=0) as source, open(sink, "w+b", buffering=0) as out:
        _digest, size = copy_hashing(source, out, limit=90)
    assert size == 90 and sink.stat().st_size == 90
    big = tmp_path / "big"
    big.write_bytes(b"x" * 10_000)
    with open(big, "rb", buffering=0) as source, open(sink, "w+b", buffering=0) as out:
        digest, size = copy_hashing(source, out, limit=90)
    assert digest == "" and size == 10_000 and sink.stat().st_size == 0  # never copied


def test_a_blob_longer_than_its_entry_is_damage_and_is_not_copied_whole(tmp_path):
    world, store, ids = _store_with_victim(tmp_path)
    manifest = store.get(ids[0])
    entry = next(e for e in manifest.files if e.path.endswith("config.json"))
    blob = Path(store.storage.local_file(keys.blob_key(entry.hash)))
    os.chmod(blob, 0o644)
    blob.write_bytes(blob.read_bytes() + b"\0" * 5_000_000)
    with pytest.raises(SnapshotDamagedError):
        download_snapshot(open_store(store.url), manifest, "resumable", str(world / "dl"))
    assert not any(p.is_file() for p in (world / "dl").rglob("*"))


def test_a_download_never_lays_out_a_link_that_leads_out_of_to(tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"w.toml": b"w", "state/checkpoint-5/model.safetensors": b"m"})
    os.symlink("../../w.toml", live / "state/checkpoint-5/config.toml")  # inside the selection
    store = open_store("file://" + str(tmp_path / "store"))
    made = store.capture(str(live), ["."], info=_info(5))
    assert any(e.path == "state/checkpoint-5/config.toml" for e in made.files)
    to = tmp_path / "to"
    with pytest.raises(UnsafePathError, match=r"config\.toml"):
        download_snapshot(store, made, "resumable", str(to))
    assert not os.path.lexists(to / "config.toml")


def test_a_chain_of_links_is_refused_at_capture_and_at_restore(tmp_path):
    live = tmp_path / "live"
    write_tree(live, {"s/t/u/f.txt": b"f", "x/y.txt": b"y"})
    os.symlink("../../../x", live / "s/t/u/b")  # b -> x, inside
    os.symlink("b/../../../../y", live / "s/t/u/a")  # lexically y; really ../y
    store = open_store("file://" + str(tmp_path / "store"))
    events = []
    made = store.capture(
        str(live), ["."], info=_info(1), on_event=lambda t, d: events.append((t, d["path"]))
    )
    assert ("capture_symlink_refused", "s/t/u/a") in events
    assert "s/t/u/a" not in {e.path for e in made.files}

    world, hostile, ids = _store_with_victim(tmp_path / "restore")

    def chain(data):
        link = {"size": 0, "mode": 0o777, "hash": "", "kind": "files"}
        base = "state/checkpoint-5/notes"
        data["files"].append({**link, "path": f"{base}/b", "target": "../../.."})
        data["files"].append({**link, "path": f"{base}/a", "target": "b/../../outside/victim.txt"})

    _edit(hostile, ids[0], chain)
    target = world / "case" / "target"
    with pytest.raises(SnapshotDamagedError, match="notes/a"):  # followed when read
        open_store(hostile.url).restore(ids[0], str(target))
    assert not os.path.lexists(target / "state/checkpoint-5/notes/a")
    assert ids[0] in open_store(hostile.url).verify().damaged


def test_a_link_that_leads_out_through_a_link_of_the_target_is_refused(tmp_path):
    """Resolved against the target: the chain may pass through a link the snapshot lacks."""
    world, store, ids = _store_with_victim(tmp_path)

    def link(data):
        entry = {"size": 0, "mode": 0o777, "hash": "", "kind": "files"}
        path = "state/checkpoint-5/notes/a"
        data["files"].append({**entry, "path": path, "target": "b/../../outside/victim.txt"})

    _edit(store, ids[1], link)
    target = world / "case" / "target"
    (target / "state/checkpoint-5/notes").mkdir(parents=True)
    os.symlink("../../..", target / "state/checkpoint-5/notes/b")  # laid out before, say
    with pytest.raises(UnsafePathError, match="notes/a"):
        open_store(store.url).restore(ids[1], str(target), overlay=True)
    assert not os.path.lexists(target / "state/checkpoint-5/notes/a")
    assert not os.path.lexists(target / "state/checkpoint-5/model.safetensors")  # none moved in


def test_an_overlay_restore_makes_no_folder_outside_before_it_refuses(tmp_path):
    world, store, ids = _store_with_victim(tmp_path)
    target = world / "target"
    target.mkdir()
    os.symlink("../outside/dir", target / "state")  # a link in the target, leading out
    before = sorted(os.listdir(world / "outside/dir"))
    with pytest.raises(UnsafePathError):
        store.restore(ids[0], str(target), overlay=True)
    assert sorted(os.listdir(world / "outside/dir")) == before  # no checkpoint-5/ made there


def test_modes_lose_setuid_setgid_and_sticky_bits(tmp_path):
    world, store, ids = _store_with_victim(tmp_path)

    def setuid(data):
        for entry in data["files"]:
            if "target" not in entry:
                entry["mode"] = 0o6777

    _edit(store, ids[0], setuid)
    target = world / "target"
    open_store(store.url).restore(ids[0], str(target))
    for path in target.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert stat.S_IMODE(path.stat().st_mode) == 0o777

    live = tmp_path / "live"
    write_tree(live, {"run.sh": b"#!/bin/sh\n"})
    os.chmod(live / "run.sh", 0o4755)
    made = store.capture(str(live), ["."], info=_info(9))
    assert made.files[0].mode == 0o755


@pytest.mark.parametrize(
    "change",
    [
        {"mode": 10**30},
        {"step": "ten"},
        {"size": -1},
        {"size": "5"},
        {"attempt": None},
        {"kind": "bogus"},
        {"mtime_ns": 10**30},
        {"id": "ckpt_ffffffffffffffff"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_field_of_the_wrong_type_is_damage_never_an_internal_error(tmp_path, change):
    _world, store, ids = _store_with_victim(tmp_path)
    ((name, value),) = change.items()

    def apply(data):
        if name in ("mode", "size", "kind", "mtime_ns"):
            next(e for e in data["files"] if "target" not in e)[name] = value
        else:
            data[name] = value

    _edit(store, ids[0], apply)
    fresh = open_store(store.url)
    assert [m.id for m in fresh.list()] == [ids[1]]  # runs snapshots leaves it out
    with pytest.raises(SnapshotDamagedError, match=name):
        fresh.get(ids[0])
    report = open_store(store.url).verify()
    assert list(report.damaged) == [ids[0]] and not report.sound


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("number", "ten"),
        ("stages", "x"),
        ("id", "run_ffffffffffff"),
        ("pid", 1.5),
        ("garbage", None),
    ],
)
def test_a_damaged_run_record_is_refused_naming_the_field(tmp_path, where, value):
    store = open_store("file://" + str(tmp_path / "store"))
    records = RunRecords(store.storage)
    record = _record()
    records.write(record)
    key = tmp_path / "store" / keys.run_record_key(RUN)
    if where == "garbage":
        key.write_bytes(b"[" * 100_000)
    else:
        target = record["stages"][0]["attempts"][0] if where in ("number", "pid") else record
        target[where] = value
        key.write_bytes(json.dumps({**record, "version": 1}).encode())
    with pytest.raises(StoreError, match="is damaged") as caught:
        records.read(RUN)
    if where != "garbage":
        assert where in str(caught.value)


def test_a_name_restore_refuses_is_refused_at_capture_naming_the_file(tmp_path):
    live = tmp_path / "live"
    write_tree(live, {**CHECKPOINT, "state/checkpoint-5/odd\\name.txt": b"odd"})
    store = open_store("file://" + str(tmp_path / "store"))
    events = []
    made = store.capture(
        str(live), ["state"], info=_info(5), on_event=lambda t, d: events.append((t, d))
    )
    assert [t for t, _ in events] == ["capture_name_refused"]
    assert events[0][1]["path"] == "state/checkpoint-5/odd\\name.txt"
    assert all("\\" not in e.path for e in made.files)
    open_store(store.url).restore(made.id, str(tmp_path / "target"))  # restorable
    assert open_store(store.url).verify().sound


def test_a_store_key_never_leaves_the_store(tmp_path):
    store = open_store("file://" + str(tmp_path / "store"))
    for key in ("../outside", "blobs/../../x", "/etc/passwd", "a//b"):
        with pytest.raises(UnsafePathError):
            store.storage.read(key)
    with pytest.raises(UnsafePathError):
        keys.blob_key("../../../outside/victim.txt")


def test_what_a_capture_writes_always_reads_back(tmp_path):
    """The checks at read never refuse a commit's own output: odd but legal values pass."""
    live = tmp_path / "live"
    write_tree(live, {"a/b c/ünïcode.txt": b"u", "a/empty": b"", "-dash": b"d"})
    os.chmod(live / "-dash", 0o6755)
    os.symlink("b c", live / "a/link")
    store = open_store("file://" + str(tmp_path / "store"))
    info = SnapshotInfo(
        run=RUN, stage=None, attempt=0, step=0, epoch=float("nan"), metrics={"loss": float("inf")}
    )
    made = store.capture(str(live), ["."], info=info)
    fresh = open_store(store.url)
    assert fresh.get(made.id).files == made.files
    fresh.restore(made.id, str(tmp_path / "target"))
    assert fresh.verify().sound


@pytest.mark.slow  # the real `nodus` command line
def test_the_commands_refuse_a_hostile_manifest_in_one_line(nodus_home, tmp_path):
    """Through the real command line: damage is a message and exit 1, never a traceback."""
    store = open_store(str(nodus_home / "store"))  # the default store of this $NODUS_HOME
    write_tree(tmp_path / "live", CHECKPOINT)
    made = store.capture(str(tmp_path / "live"), ["state"], info=_info(5))

    def hostile(data):
        data["step"] = "ten"
        data["files"][0]["mode"] = 10**30

    _edit(store, made.id, hostile)
    for args in (
        ("store", "verify"),
        ("snapshots", "download", made.id, "--to", str(tmp_path / "to")),
        ("gc",),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "nodus", *args], capture_output=True, text=True, timeout=120
        )
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, args
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert made.id in proc.stdout + proc.stderr, args
