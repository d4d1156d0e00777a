"""``nodus snapshots download`` and ``nodus runs outputs``: verified copies out of the store.

An artifact is a choice of files from one snapshot, laid out the way its framework loads them:

    model      weights, config and tokenizer   AutoModelForCausalLM / AutoTokenizer.from_pretrained
               (a LoRA checkpoint of a managed method: its adapter merged into the run's base
               model, :mod:`nodus.inventory.merging`)
    resumable  everything in the checkpoint    Trainer.train(resume_from_checkpoint=DIR)
    adapter    the LoRA adapter files only     PeftModel.from_pretrained

A snapshot stores its checkpoint as ``state/checkpoint-<step>/…``; the download puts that
folder's files at the top of ``--to`` (taking the folder of the snapshot's own step when the
selection held several). A selection captured whole has no such folder; its weights
(``model``, ``adapter``) are those of the folder whose name carries the snapshot's own step
(Accelerate's ``step_<n>``: :mod:`nodus.stages.step_names`), where there is one.

Every file is hashed while it is written, under a temporary name, and renamed into place only
once all of them matched the manifest: a damaged snapshot leaves nothing half-written behind.
The folder is synced (files, folders, its entry) before the command says it is written: what it
acknowledged survives a power loss.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

from nodus._atomic import sync_tree
from nodus.errors import NotFoundError, UnsafePathError, UsageError
from nodus.inventory.progress import Progress
from nodus.protocol import checkpoint_step
from nodus.stages import step_names
from nodus.stages.directory import step_folders
from nodus.store.kinds import KIND_STATE, KIND_WEIGHTS

if TYPE_CHECKING:
    from nodus.store import SnapshotStore

__all__ = [
    "ARTIFACTS",
    "download_outputs",
    "download_snapshot",
    "download_weights",
    "select",
    "written_json",
]

ARTIFACTS = ("model", "resumable", "adapter")

_ADAPTER = ("adapter_model.*", "adapter_config.json")
_MODEL_WEIGHTS = (
    "model.safetensors",
    "model-*-of-*.safetensors",
    "pytorch_model.bin",
    "pytorch_model-*-of-*.bin",
)
_WEIGHTS_ANY = _MODEL_WEIGHTS + _ADAPTER


def download_snapshot(
    store: SnapshotStore,
    manifest: Any,
    artifact: str,
    target: str,
    stream: IO[str] | None = None,
    *,
    run: Any | None = None,
) -> list[str]:
    """Write ``artifact`` of ``manifest`` into the empty folder ``target``; the paths written.

    ``run`` is the snapshot's run when the catalog knows it (its resolution names the base
    model a LoRA checkpoint's ``model`` is merged into; else the store's run record does)."""
    if artifact == "model" and _holds_adapter_only(manifest):
        return _durable(target, _merged(store, manifest, run, target, stream))
    pairs = select(manifest, artifact)
    label = f"{manifest.id} {artifact}"
    return _durable(target, _write(store, manifest.id, pairs, target, label, stream))


def download_weights(
    store: SnapshotStore, manifest: Any, label: str, target: str, stream: IO[str] | None = None
) -> list[str]:
    """Every weights file of ``manifest`` (a model-registry version's own files) laid out as
    a ``model`` download lays them out, or as an ``adapter`` one for a LoRA adapter."""
    adapter = any(_named(e, _ADAPTER) for e in manifest.files) and not any(
        _named(e, _MODEL_WEIGHTS) for e in manifest.files
    )
    pairs = select(manifest, "adapter" if adapter else "model")
    return _durable(target, _write(store, manifest.id, pairs, target, label, stream))


def download_outputs(
    store: SnapshotStore, manifests: list[Any], target: str, stream: IO[str] | None = None
) -> list[str]:
    """Lay the outputs snapshots over each other in order (later stages win), verified."""
    chosen: dict[str, Any] = {}
    for manifest in manifests:
        for entry in manifest.held_files():
            chosen[entry.path] = entry
    label = f"outputs of {manifests[-1].run}"
    pairs = [(e, e.path) for e in chosen.values()]
    return _durable(target, _write(store, manifests[-1].id, pairs, target, label, stream))


def written_json(snapshot: str, artifact: str, to: str, files: list[str]) -> dict[str, Any]:
    """The ``--json`` report of a download: what was written where (``files`` relative)."""
    return {"snapshot": snapshot, "artifact": artifact, "to": to, "files": files}


# --- which files ------------------------------------------------------------------------------


def select(manifest: Any, artifact: str) -> list[tuple[Any, str]]:
    """(entry, destination) pairs of ``artifact``; refuses with the reason when there are none."""
    if artifact not in ARTIFACTS:
        raise UsageError(f"--artifact {artifact!r}: use one of {', '.join(ARTIFACTS)}")
    choose = {"model": _model, "resumable": _resumable, "adapter": _adapter}[artifact]
    return _pairs(manifest, choose, weights=artifact != "resumable")


def _pairs(manifest: Any, choose: Any, *, weights: bool) -> list[tuple[Any, str]]:
    base, inside = _inside_checkpoint(manifest, weights=weights)
    chosen = choose(manifest, inside)
    if base is None:
        base = _common_folder(e.path for e in chosen)
    return [(entry, entry.path[len(base) :]) for entry in chosen]


def _inside_checkpoint(manifest: Any, *, weights: bool = False) -> tuple[str | None, list[Any]]:
    """The snapshot's checkpoint folder (None: there is none) and the held files inside it.
    For its weights (``weights``), a selection captured whole with several step-named folders
    (Accelerate's ``step_N``) has its checkpoint in the folder of the snapshot's own step."""
    held = manifest.held_files()
    base = _checkpoint_prefix(manifest, held)
    if base is None and weights:
        base = _step_folder(manifest, held)
    return base, [e for e in held if base is None or e.path.startswith(base)]


def _step_folder(manifest: Any, entries: list[Any]) -> str | None:
    """``…/step_<step>/`` (any name :mod:`nodus.stages.step_names` knows) of the snapshot's
    step that holds model weights, the outermost; None when there is none."""
    folders = step_folders((entry.path, 0, 0) for entry in entries)
    own = [
        folder
        for folder, files in folders.items()
        if _carried_step(folder) == manifest.step
        and any(fnmatch.fnmatchcase(posixpath.basename(f), p) for f in files for p in _WEIGHTS_ANY)
    ]
    return min(own, key=len) + "/" if own else None


def _carried_step(folder: str) -> int | None:
    named = step_names.step_of([posixpath.basename(folder)])
    return None if named is None else named.step


def _holds_adapter_only(manifest: Any) -> bool:
    _, entries = _inside_checkpoint(manifest, weights=True)
    return any(_named(e, _ADAPTER) for e in entries) and not any(
        _named(e, _MODEL_WEIGHTS) for e in entries
    )


def _weights(manifest: Any, entries: list[Any]) -> list[Any]:
    return [e for e in entries if e.kind == KIND_WEIGHTS]


def _model(manifest: Any, entries: list[Any]) -> list[Any]:
    files = [e for e in entries if e.kind == KIND_WEIGHTS and not _named(e, _ADAPTER)]
    if not any(_named(e, _MODEL_WEIGHTS) for e in files):
        raise NotFoundError(f"{manifest.id} holds no model weights{_why_not(manifest, entries)}")
    return files


def _adapter(manifest: Any, entries: list[Any]) -> list[Any]:
    files = [e for e in entries if _named(e, _ADAPTER)]
    if not files:
        raise NotFoundError(
            f"{manifest.id} holds no LoRA adapter files (adapter_model.*, adapter_config.json)"
            f"{_why_not(manifest, entries)}"
        )
    return files


def _resumable(manifest: Any, entries: list[Any]) -> list[Any]:
    if KIND_STATE in manifest.deleting:
        raise NotFoundError(
            f"{manifest.id} no longer holds its training state (retention deleted it); "
            "--artifact model still gives its weights, and `nodus snapshots pin` keeps a "
            "snapshot's state from now on"
        )
    if not entries:
        raise NotFoundError(f"{manifest.id} holds no files")
    return entries


def _why_not(manifest: Any, entries: list[Any]) -> str:
    """The reason a user can act on: deleted by retention, or another artifact instead."""
    if KIND_WEIGHTS in manifest.deleting:
        return " any more (retention deleted them; pin snapshots whose weights you want kept)"
    if any(_named(e, _ADAPTER) for e in entries):
        return "; it holds a LoRA adapter: use --artifact adapter"
    if any(_named(e, _MODEL_WEIGHTS) for e in entries):
        return "; it holds full model weights: use --artifact model"
    kinds = ", ".join(manifest.kinds) or "nothing"
    return f" (it holds {kinds}); --artifact resumable downloads every file it holds"


def _named(entry: Any, patterns: tuple[str, ...]) -> bool:
    name = posixpath.basename(entry.path)
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _checkpoint_prefix(manifest: Any, entries: list[Any]) -> str | None:
    """``…/checkpoint-<step>/`` of the snapshot's step, else the newest such folder, else None."""
    prefixes: dict[str, int] = {}
    for entry in entries:
        found = _checkpoint_folder_of(entry.path)
        if found is not None:
            prefixes[found[0]] = found[1]
    if not prefixes:
        return None
    own = [p for p, step in prefixes.items() if step == manifest.step]
    return own[0] if own else max(prefixes, key=lambda p: prefixes[p])


def _checkpoint_folder_of(path: str) -> tuple[str, int] | None:
    """(``…/checkpoint-<step>/``, step) of the innermost checkpoint folder holding ``path``."""
    folders = path.split("/")[:-1]
    for depth in range(len(folders), 0, -1):
        step = checkpoint_step(folders[depth - 1])
        if step is not None:
            return "/".join(folders[:depth]) + "/", step
    return None


def _common_folder(paths: Iterable[str]) -> str:
    folders = [posixpath.dirname(path) for path in paths]
    if not folders:
        return ""
    common = posixpath.commonpath(folders)
    return common + "/" if common else ""


# --- a LoRA checkpoint's model ----------------------------------------------------------------


def _merged(
    store: SnapshotStore, manifest: Any, run: Any | None, target: str, stream: IO[str] | None
) -> list[str]:
    """The adapter and tokenizer laid out verified, merged into the run's base model, all in a
    folder beside ``target`` that replaces it (empty) once whole."""
    from nodus.inventory.merging import base_model_of, merge

    base_model = base_model_of(store, manifest, run)
    _prepare(target)
    work = tempfile.mkdtemp(prefix=".nodus-merge-", dir=os.path.dirname(os.path.abspath(target)))
    try:
        adapter = os.path.join(work, "adapter")
        pairs = _pairs(manifest, _weights, weights=True)
        _write(store, manifest.id, pairs, adapter, f"{manifest.id} adapter", stream)
        built = os.path.join(work, "model")
        merge(manifest, base_model, adapter, built)
        os.replace(built, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return sorted(
        os.path.relpath(os.path.join(folder, name), target)
        for folder, _, names in os.walk(target)
        for name in names
    )


# --- verified writing -------------------------------------------------------------------------


def _durable(target: str, files: list[str]) -> list[str]:
    """A download is said to be written once it would survive a power loss: its files, its
    folders and the folder's own entry synced (docs/store.md, "Durability")."""
    sync_tree(target)
    return files


def _write(
    store: SnapshotStore,
    snapshot_id: str,
    pairs: list[tuple[Any, str]],
    target: str,
    label: str,
    stream: IO[str] | None,
) -> list[str]:
    from nodus.store.restore import unsafe_reason

    for entry, dest in pairs:
        reason = unsafe_reason(entry) or (None if dest else "is empty")
        if reason is not None:
            raise UnsafePathError(f"snapshot {snapshot_id}: path {entry.path!r} {reason}; refusing")
    _prepare(target)
    progress = Progress(label, sum(e.size for e, _ in pairs if not e.is_link), stream)
    try:
        store.restore_files(snapshot_id, pairs, target, wrap=lambda sink: _Counting(sink, progress))
    finally:
        progress.close()
    return sorted(dest for _, dest in pairs)


def _prepare(target: str) -> None:
    if os.path.exists(target) and not os.path.isdir(target):
        raise UsageError(f"--to {target}: exists and is not a folder")
    if os.path.isdir(target) and os.listdir(target):
        raise UsageError(f"--to {target}: the folder is not empty; give a new or empty folder")
    os.makedirs(target, exist_ok=True)


class _Counting:
    """A file wrapper that tells the progress bar about every chunk written."""

    def __init__(self, sink: Any, progress: Progress) -> None:
        self._sink = sink
        self._progress = progress

    def write(self, chunk) -> int:
        written = self._sink.write(chunk)
        self._progress.advance(len(chunk) if written is None else written)
        return written
