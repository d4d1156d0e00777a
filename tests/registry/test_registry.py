"""The model registry over a real catalog and a real file store, no training: numbering,
idempotence, aliases, references, refusals, and the weights a version keeps through retention
and gives back to ``nodus gc`` when it is deleted. The end-to-end run is in tests/hf."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodus import Client
from nodus.errors import NotFoundError, UsageError
from nodus.registry import Registry
from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.phases import Phase
from nodus.store import SnapshotInfo, open_store
from nodus.store.keys import blob_key
from run_phases import move_to

RUN = "run_0123456789ab"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _store(home: Path):
    return open_store("file://" + str(home / "store"))


def _save(home: Path, tmp_path: Path, step: int, weights: bytes, *, epoch=None, state=True):
    """A committed checkpoint as the integration leaves one: weights, config, optimizer."""
    root = tmp_path / f"copy-{step}-{len(os.listdir(tmp_path))}"
    folder = root / "state" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if weights:
        (folder / "model.safetensors").write_bytes(weights)
        (folder / "config.json").write_text('{"model_type": "gpt2"}')
    if state:
        (folder / "optimizer.pt").write_bytes(b"optimizer %d" % step)
    info = SnapshotInfo(run=RUN, stage="main", attempt=1, step=step, epoch=epoch)
    return _store(home).capture(str(root), ["state"], info=info)


def _blob_exists(home: Path, digest: str) -> bool:
    return (home / "store" / blob_key(digest)).exists()


def test_versions_number_in_order_and_registering_again_keeps_the_version(home, tmp_path):
    client = Client(home)
    first = _save(home, tmp_path, 10, b"w10")
    second = _save(home, tmp_path, 20, b"w20")
    one = client.register(first.id, model="tiny")
    assert (one["ref"], one["new"], one["step"], one["origin"]) == ("tiny:1", True, 10, "manual")
    again = client.register(first.id, model="tiny")
    assert (again["ref"], again["new"]) == ("tiny:1", False)
    assert client.register(second.id, model="tiny")["ref"] == "tiny:2"
    assert client.register(first.id, model="other")["ref"] == "other:1"
    assert [(m["ref"], m["newest"]) for m in client.models()] == [
        ("other:1", True),
        ("tiny:1", False),
        ("tiny:2", True),
    ]
    assert client.model("tiny")["version"] == 2  # no version: the newest
    assert client.model("tiny:1")["snapshot"] == first.id


def test_an_alias_moves_and_goes_with_its_version(home, tmp_path):
    client = Client(home)
    for step in (10, 20):
        client.register(_save(home, tmp_path, step, b"w%d" % step).id, model="tiny")
    assert client.alias_model("tiny", 1, "prod")["aliases"] == ["prod"]
    assert client.model("tiny@prod")["version"] == 1
    moved = client.alias_model("tiny", "2", "prod")
    assert (moved["ref"], moved["aliases"]) == ("tiny:2", ["prod"])
    assert client.model("tiny:1")["aliases"] == []
    client.delete_model("tiny:2")
    with pytest.raises(NotFoundError, match="model 'tiny' has no alias 'prod'"):
        client.model("tiny@prod")


def test_unknown_names_versions_and_aliases_are_named(home, tmp_path):
    client = Client(home)
    client.register(_save(home, tmp_path, 10, b"w10").id, model="tiny")
    for ref, said in (
        ("nope", "no model named 'nope'"),
        ("tiny:7", "model 'tiny' has no version 7 (its versions: 1)"),
        ("tiny@best", "model 'tiny' has no alias 'best'"),
    ):
        with pytest.raises(NotFoundError, match=said.replace("(", r"\(").replace(")", r"\)")):
            client.model(ref)
    for ref in ("tiny:", "tiny:0", "Tiny", "tiny@1x", ":3"):
        with pytest.raises(UsageError):
            client.model(ref)
    with pytest.raises(UsageError, match="NAME:VERSION"):
        client.delete_model("tiny")
    with pytest.raises(NotFoundError, match="no version 3"):
        client.alias_model("tiny", 3, "best")


def test_refusals_on_the_command_line_say_why_without_a_traceback(home, tmp_path):
    no_weights = _save(home, tmp_path, 10, b"")
    env = dict(os.environ, NODUS_HOME=str(home))
    env.pop("NODUS_STORE", None)
    for args, said in (
        (["models", "get", "nope"], "no model named 'nope'"),
        (["snapshots", "register", no_weights.id, "--model", "m"], "holds no weights"),
        (["snapshots", "register", no_weights.id], "name the model with --model"),
        (["models", "download", "nope:1", "--to", str(tmp_path / "d")], "no model named"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "nodus", *args], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 2, proc.stderr
        assert said in proc.stderr and "Traceback" not in proc.stderr


def test_a_version_keeps_its_weights_after_the_snapshot_goes_until_it_is_deleted(home, tmp_path):
    client = Client(home)
    shared = b"weights both versions share"
    first = _save(home, tmp_path, 10, b"only the first")
    second = _save(home, tmp_path, 20, shared)
    client.register(first.id, model="tiny")
    client.register(second.id, model="tiny")
    store = _store(home)
    store.delete_kind(first.id, "weights", reason="rotation")
    store.delete(second.id, reason="run deleted")
    gc = client.gc()
    assert gc["errors"] == []
    weights = {e.path.rsplit("/", 1)[1]: e.hash for e in first.files if e.kind == "weights"}
    optimizer = next(e.hash for e in first.files if e.kind == "state")
    assert _blob_exists(home, weights["model.safetensors"])  # held by tiny:1 alone
    assert _blob_exists(home, optimizer)  # state is not a version's: retention may take it

    written = client.download_model("tiny:1", tmp_path / "out")
    assert sorted(written["files"]) == ["config.json", "model.safetensors"]
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == b"only the first"

    deleted = client.delete_model("tiny:1")
    assert deleted["freed_bytes"] >= len(b"only the first")
    client.gc()
    assert not _blob_exists(home, weights["model.safetensors"])
    client.download_model("tiny:2", tmp_path / "two")  # the other version is untouched
    assert (tmp_path / "two" / "model.safetensors").read_bytes() == shared
    assert client.register(_save(home, tmp_path, 30, b"w30").id, model="tiny")["ref"] == "tiny:3"


def test_a_catalog_rebuilt_from_the_store_finds_the_versions(home, tmp_path):
    client = Client(home)
    for step in (10, 20):
        client.register(_save(home, tmp_path, step, b"w%d" % step).id, model="tiny")
    client.alias_model("tiny", 1, "prod")
    elsewhere = Catalog(str(tmp_path / "new-home"))
    registry = Registry(elsewhere.models)
    assert registry.adopt(_store(home), RUN) == 2
    assert [v.ref for v in registry.versions()] == ["tiny:1", "tiny:2"]
    assert registry.resolve("tiny@prod").version == 1
    # Registering a snapshot that the store already records keeps its number.
    manifest = _store(home).list(run=RUN)[0]
    fresh = Registry(Catalog(str(tmp_path / "third-home")).models)
    assert fresh.register(_store(home), manifest, "tiny", "manual")[0].ref == "tiny:1"


def test_an_epoch_hold_is_released_only_once_the_run_has_stopped(home, tmp_path):
    catalog = Catalog(str(home))
    workload = {"stages": [{"name": "main", "execution": {"save_each_epoch": True}}]}
    catalog.create_run(
        name="tiny",
        workload=workload,
        store="file://" + str(home / "store"),
        key=None,
        lock_name="x",
        stage_names=["main"],
        run_id=RUN,
    )
    move_to(catalog, RUN, Phase.RUNNING)
    epoch_save = _save(home, tmp_path, 12, b"w12", epoch=1.0)
    env = dict(os.environ, NODUS_HOME=str(home))
    env.pop("NODUS_STORE", None)

    def release():
        return subprocess.run(
            [sys.executable, "-m", "nodus", "snapshots", "release", epoch_save.id],
            env=env,
            capture_output=True,
            text=True,
        )

    refused = release()
    assert refused.returncode == 2 and "released once the run has finished" in refused.stderr
    move_to(catalog, RUN, Phase.SUCCEEDED)
    released = release()
    assert released.returncode == 0 and "released (epoch hold)" in released.stderr


def _succeeded_unregistered(home: Path, tmp_path: Path) -> list:
    """A run SUCCEEDED whose runner was killed before it registered the run's model: the
    catalog's phase set as the runner sets it, two committed saves, nothing registered."""
    catalog = Catalog(str(home))
    catalog.create_run(
        name="tiny",
        workload={"stages": [{"name": "main", "execution": {}}]},
        store="file://" + str(home / "store"),
        key=None,
        lock_name="x",
        stage_names=["main"],
        run_id=RUN,
    )
    saves = [_save(home, tmp_path, step, b"w%d" % step) for step in (10, 20)]
    catalog.set_stage(RUN, "main", phase=Phase.SUCCEEDED)
    move_to(catalog, RUN, Phase.SUCCEEDED)
    return saves


def test_gc_registers_a_succeeded_runs_model_once_and_never_brings_a_deleted_one_back(
    home, tmp_path
):
    final = _succeeded_unregistered(home, tmp_path)[-1]
    client = Client(home)
    assert client.models() == []
    report = client.gc()
    assert report["errors"] == []
    assert report["registered"] == [{"run": RUN, "model": "tiny:1", "snapshot": final.id}]
    (version,) = client.models()
    assert (version["ref"], version["step"], version["origin"], version["run_model"]) == (
        "tiny:1",
        20,
        "run",
        True,
    )
    assert client.gc()["registered"] == []  # idempotent: still the one version
    assert [v["ref"] for v in client.models()] == ["tiny:1"]

    client.delete_model("tiny:1")
    assert client.gc()["registered"] == []  # a deletion is not undone by the next gc
    assert client.models() == []


def test_adoption_registers_the_model_no_machine_registered(home, tmp_path):
    from nodus.runner.remote.adoption import adopt_from_store
    from nodus.runner.remote.record import publish_accepted

    final = _succeeded_unregistered(home, tmp_path)[-1]
    publish_accepted(Catalog(str(home)), _store(home), RUN)  # the record says SUCCEEDED
    elsewhere = Catalog(str(tmp_path / "new-home"))
    adopt_from_store(elsewhere, _store(home), RUN)
    model = Registry(elsewhere.models).run_model(RUN)
    assert model is not None and (model.ref, model.snapshot) == ("tiny:1", final.id)
    # The version is in the store too: the first machine's catalog finds it under its number.
    assert Client(home).gc()["registered"] == [
        {"run": RUN, "model": "tiny:1", "snapshot": final.id}
    ]
    assert [v["ref"] for v in Client(home).models()] == ["tiny:1"]
