"""The model registry end to end: a two-epoch quick-start run under hf-trainer-v1 with
``save_each_epoch``, real `nodus` processes, one trained run for the whole module.

Saves at steps 6, 12, 18 and 24; 12 and 24 end epochs 1 and 2. Each epoch's weights become a
version as their snapshot commits, and the final save (step 24) is both the epoch-2 save and
the run's model, so it is version 2, not a third one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_e2e_helpers import Project

from nodus.qualify import weights_hash
from nodus.store import open_store
from nodus.store.keys import blob_key

# Both tests use the module's trained run: one xdist worker trains it, once.
pytestmark = [pytest.mark.hf, pytest.mark.slow, pytest.mark.xdist_group("hf_registry")]

MODEL = "quickstart-e2e"  # the run's name: its model's name


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Project:
    project = Project(
        tmp_path_factory.mktemp("registry"),
        env={"QUICKSTART_EPOCHS": "2"},
        write_delay="0",
    )
    proc = project.nodus("run", str(project.file), "--key", "reg", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return project


def _json(project: Project, *args: str) -> dict | list:
    proc = project.nodus(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _refused(project: Project, *args: str) -> str:
    proc = project.nodus(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_epochs_and_the_run_model_are_versions_and_an_alias_moves(trained: Project):
    assert trained.get("reg")["model"] == {
        "ref": f"{MODEL}:2",
        "name": MODEL,
        "version": 2,
        "snapshot": trained.get("reg")["model"]["snapshot"],
        "step": 24,
        "epoch": 2.0,
    }
    listed = _json(trained, "models", "list")
    assert [(v["ref"], v["step"], v["epoch"], v["origin"], v["run_model"]) for v in listed] == [
        (f"{MODEL}:1", 12, 1.0, "epoch", False),
        (f"{MODEL}:2", 24, 2.0, "epoch", True),
    ]
    candidate = _json(trained, "snapshots", "candidate", "reg@12")
    assert (candidate["version"], candidate["epoch"], candidate["step"]) == (f"{MODEL}:1", 1, 12)
    inside = _json(trained, "snapshots", "candidate", "reg@6")
    assert inside["epoch_save"] is False and "not an epoch-end save" in inside["reason"]

    # A save registered by hand after the run's model is the newest version; `runs get` still
    # names the run's model by its exact version.
    registered = _json(trained, "snapshots", "register", "reg@18")
    assert (registered["ref"], registered["new"], registered["newest"]) == (
        f"{MODEL}:3",
        True,
        True,
    )
    assert _json(trained, "models", "get", MODEL)["version"] == 3
    assert trained.get("reg")["model"]["ref"] == f"{MODEL}:2"

    assert _json(trained, "models", "alias", MODEL, "2", "prod")["ref"] == f"{MODEL}:2"
    assert _json(trained, "models", "get", f"{MODEL}@prod")["version"] == 2
    _json(trained, "models", "alias", MODEL, "1", "prod")
    assert _json(trained, "models", "get", f"{MODEL}@prod")["version"] == 1
    assert "has no alias 'best'" in _refused(trained, "models", "get", f"{MODEL}@best")
    assert "has no version 9" in _refused(trained, "models", "get", f"{MODEL}:9")


def test_versions_outlive_their_run_and_deleting_one_frees_its_blobs(trained: Project, tmp_path):
    from transformers import AutoModelForCausalLM

    final = trained.outputs_hash("reg")  # the run's model as `runs outputs` hands it out
    first = _json(trained, "models", "get", f"{MODEL}:1")
    first_weights = next(f["hash"] for f in first["files"] if f["path"].endswith(".safetensors"))

    deleted = trained.nodus("runs", "delete", "reg")
    assert deleted.returncode == 0, deleted.stderr
    assert trained.nodus("gc").returncode == 0
    store = open_store("file://" + str(trained.home / "store"))
    assert store.list(role=None) == []  # retention's side: no snapshot of the run is left

    for version in (1, 2):
        target = tmp_path / f"v{version}"
        written = _json(trained, "models", "download", f"{MODEL}:{version}", "--to", str(target))
        assert "model.safetensors" in written["files"]
        AutoModelForCausalLM.from_pretrained(str(target))  # loads with no nodus in the way
    assert weights_hash(str(tmp_path / "v2")) == final

    assert _json(trained, "models", "delete", f"{MODEL}:1")["ref"] == f"{MODEL}:1"
    assert trained.nodus("gc").returncode == 0
    assert not _blob(trained, first_weights).exists()
    assert "has no alias 'prod'" in _refused(trained, "models", "get", f"{MODEL}@prod")
    again = tmp_path / "v2-again"
    _json(trained, "models", "download", f"{MODEL}:2", "--to", str(again))
    assert weights_hash(str(again)) == final


def _blob(project: Project, digest: str) -> Path:
    return project.home / "store" / blob_key(digest)
