"""Snapshot ids and store keys: each kind of key built by one function and parsed by one.

Capture, list, restore, check, holds, deletion and GC all call these, so the layout below is
the whole truth about where things live in a store (keys are ``/``-separated and relative to
the store's root URL)::

    blobs/<h[:2]>/<h>            file contents, named by their xxh3-128 (32 hex digits)
    snapshots/<id>.json          a manifest; writing it is the commit
    index/<id>.<run id>          the run a snapshot is of, by name alone (run_index.py)
    tombstones/<id>.<kind>       deletion of one kind of a snapshot has begun
    holds/<id>/<name>.json       a stored hold on a snapshot (a pin, a released epoch hold)
    intents/<id>.json            a capture is running (blob GC leaves its blobs alone)
    locks/sweep-<16 hex>.json    a blob sweep is running, one lock per sweeper (captures wait)
    quarantine/<id>.json         a damaged manifest set aside by ``nodus store verify --repair``
    runs/<run id>/record.json    a run's record: what recovering it from the store alone needs
    keys/<sha256(key)[:32]>.json the run a ``--key`` names, for a machine that never saw it
    leases/<run id>.json         who drives a run now, until when (run_records.py)
    models/<name>/<n>.json       a model-registry version: its own reference to weights blobs
    models/<name>/aliases.json   the model's aliases, mirrored from the catalog (model_records.py)
    tmp/<purpose>-<16 hex>       temporary names of blobs and objects being written (file://)

Every kind of key that is listed has one parser, which returns None for a key not of its kind,
so a stray object (a file someone copied into the store by hand) is skipped, never misread.
Quarantined manifests are only ever read by their key, so they have none.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable

from nodus.errors import UnsafePathError
from nodus.schemas.snapshot_ref import is_snapshot_id  # the one id grammar, used here too

__all__ = [
    "BLOBS",
    "HOLDS",
    "INDEX",
    "INTENTS",
    "LEASES",
    "LOCKS",
    "MODELS",
    "MODEL_NAME_PATTERN",
    "RUNS",
    "RUN_KEYS",
    "SNAPSHOTS",
    "TMP",
    "TOMBSTONES",
    "blob_key",
    "checked",
    "hash_of_blob_key",
    "hold_folder",
    "hold_key",
    "hold_of_key",
    "index_key",
    "index_of_key",
    "intent_key",
    "intent_of_key",
    "is_snapshot_id",
    "lease_key",
    "manifest_key",
    "model_aliases_key",
    "model_version_key",
    "model_version_of_key",
    "new_snapshot_id",
    "new_sweep_token",
    "quarantine_key",
    "run_key_index_key",
    "run_record_key",
    "snapshot_id_of_key",
    "sweep_key",
    "sweep_of_key",
    "temp_key",
    "tombstone_key",
    "tombstone_of_key",
]

# Top-level folders; a listing is asked for by one of these prefixes.
BLOBS = "blobs"
SNAPSHOTS = "snapshots"
TOMBSTONES = "tombstones"
HOLDS = "holds"
INDEX = "index"
INTENTS = "intents"
LOCKS = "locks"
QUARANTINE = "quarantine"
TMP = "tmp"
RUNS = "runs"
RUN_KEYS = "keys"
LEASES = "leases"
MODELS = "models"

_JSON = ".json"

# A run's source and final outputs live in the same store as its checkpoints; the prefix tells
# them apart at a glance in logs and on the command line.
_PREFIX = {"checkpoint": "ckpt", "source": "src", "outputs": "out"}
_HASH = re.compile(r"^[0-9a-f]{32}\Z")
_HOLD_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
_TOKEN = re.compile(r"^[0-9a-f]{16}$")
_SWEEP = "sweep-"
_ALIASES = "aliases"

MODEL_NAME_PATTERN = r"[a-z0-9][a-z0-9._-]*"
"""A model name (the workload-name grammar): safe as one key segment on every storage."""
_MODEL_NAME = re.compile(rf"^{MODEL_NAME_PATTERN}$")
_VERSION = re.compile(r"^[1-9][0-9]*$")
# A run id as one key segment: nodus's own (``run_<hex>``) and any other without a separator.
_RUN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*\Z")


# --- snapshot ids --------------------------------------------------------------------------------


def new_snapshot_id(role: str = "checkpoint") -> str:
    """A fresh id such as ``ckpt_1f3a…``; random, so concurrent attempts never collide."""
    return f"{_PREFIX[role]}_{_token()}"


# --- blobs ---------------------------------------------------------------------------------------


def blob_key(digest: str) -> str:
    # Manifests are checked when read, so a digest that is no hash (``../../victim``) never
    # gets here; refused all the same, since this key is read and deleted.
    if not _HASH.match(digest):
        raise UnsafePathError(f"blob name {digest[:80]!r} is not 32 hex digits; refusing")
    # Two hex digits of fan-out keep directory listings short on file:// stores.
    return f"{BLOBS}/{digest[:2]}/{digest}"


def hash_of_blob_key(key: str) -> str | None:
    """The digest a blob key names, or None for anything else under ``blobs/``."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != BLOBS:
        return None
    digest = parts[2]
    return digest if _HASH.match(digest) and parts[1] == digest[:2] else None


# --- manifests, tombstones, quarantine -----------------------------------------------------------


def manifest_key(snapshot_id: str) -> str:
    return f"{SNAPSHOTS}/{snapshot_id}{_JSON}"


def snapshot_id_of_key(key: str) -> str | None:
    """The snapshot id a manifest key names, or None for anything else."""
    return _id_in(key, SNAPSHOTS)


def tombstone_key(snapshot_id: str, kind: str) -> str:
    return f"{TOMBSTONES}/{snapshot_id}.{kind}"


def tombstone_of_key(key: str) -> tuple[str, str] | None:
    """(snapshot id, kind) a tombstone key names, or None for anything else."""
    folder, _, name = key.partition("/")
    snapshot_id, dot, kind = name.partition(".")
    if folder != TOMBSTONES or not dot or not kind or not is_snapshot_id(snapshot_id):
        return None
    return snapshot_id, kind


def index_key(snapshot_id: str, run: str) -> str | None:
    """The index entry naming ``run`` as the run of ``snapshot_id``; None for a run id that is
    not one safe key segment (that snapshot is then found by reading its manifest)."""
    if not is_snapshot_id(snapshot_id) or not _RUN.match(run):
        return None
    return f"{INDEX}/{snapshot_id}.{run}"


def index_of_key(key: str) -> tuple[str, str] | None:
    """(snapshot id, run id) an index entry names, or None for anything else."""
    folder, _, name = key.partition("/")
    snapshot_id, dot, run = name.partition(".")
    if folder != INDEX or not dot or not _RUN.match(run) or not is_snapshot_id(snapshot_id):
        return None
    return snapshot_id, run


def quarantine_key(snapshot_id: str) -> str:
    """Where ``nodus store verify --repair`` sets a damaged manifest aside (never listed)."""
    return f"{QUARANTINE}/{snapshot_id}{_JSON}"


# --- holds ---------------------------------------------------------------------------------------


def hold_key(snapshot_id: str, name: str) -> str:
    """A stored hold on a snapshot; ``name`` is the hold's record name (``pin``, …)."""
    return f"{hold_folder(snapshot_id)}/{name}{_JSON}"


def hold_folder(snapshot_id: str) -> str:
    """The folder key of every hold on one snapshot (listed when the snapshot goes)."""
    return f"{HOLDS}/{snapshot_id}"


def hold_of_key(key: str) -> tuple[str, str] | None:
    """(snapshot id, hold name) a hold key names, or None for anything else."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != HOLDS or not parts[2].endswith(_JSON):
        return None
    snapshot_id, name = parts[1], parts[2][: -len(_JSON)]
    return (snapshot_id, name) if is_snapshot_id(snapshot_id) and _HOLD_NAME.match(name) else None


# --- runs: records, --key index, leases ----------------------------------------------------------


def run_record_key(run_id: str) -> str:
    """A run's record; a folder per run leaves room for more of its small records."""
    return f"{RUNS}/{run_id}/record{_JSON}"


def run_key_index_key(key: str) -> str:
    """Where the run of a ``--key`` is named; a key is any text, so its hash names the object."""
    return f"{RUN_KEYS}/{hashlib.sha256(key.encode()).hexdigest()[:32]}{_JSON}"


def lease_key(run_id: str) -> str:
    """The lease of the runner driving ``run_id`` (none while no runner drives it)."""
    return f"{LEASES}/{run_id}{_JSON}"


# --- the model registry -------------------------------------------------------------------------


def model_version_key(name: str, version: int) -> str:
    """The record of version ``version`` of model ``name`` (its files and their blobs)."""
    return f"{MODELS}/{name}/{version}{_JSON}"


def model_aliases_key(name: str) -> str:
    """The aliases of model ``name`` (never parsed as a version: it is not a number)."""
    return f"{MODELS}/{name}/{_ALIASES}{_JSON}"


def model_version_of_key(key: str) -> tuple[str, int] | None:
    """(model name, version) a version record's key names, or None for anything else."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != MODELS or not parts[2].endswith(_JSON):
        return None
    name, number = parts[1], parts[2][: -len(_JSON)]
    if not _MODEL_NAME.match(name) or not _VERSION.match(number):
        return None
    return name, int(number)


# --- coordination between captures and sweeps, and temporary names ------------------------------


def intent_key(snapshot_id: str) -> str:
    return f"{INTENTS}/{snapshot_id}{_JSON}"


def intent_of_key(key: str) -> str | None:
    """The snapshot id whose capture an intent key announces, or None for anything else."""
    return _id_in(key, INTENTS)


def new_sweep_token() -> str:
    """A fresh name for one sweeper's lock."""
    return _token()


def sweep_key(token: str) -> str:
    """The lock of one blob sweep. Each sweeper has its own, so one that ends never drops the
    lock another still needs, and each sees the others by listing ``locks/``."""
    return f"{LOCKS}/{_SWEEP}{token}{_JSON}"


def sweep_of_key(key: str) -> str | None:
    """The sweeper's token a sweep lock key names, or None for anything else."""
    folder, _, name = key.partition("/")
    if folder != LOCKS or not name.startswith(_SWEEP) or not name.endswith(_JSON):
        return None
    token = name[len(_SWEEP) : -len(_JSON)]
    return token if _TOKEN.match(token) else None


def temp_key(purpose: str) -> str:
    """A fresh temporary name (``tmp/blob-1f3a…``); anything under ``tmp/`` is a leftover."""
    return f"{TMP}/{purpose}-{_token()}"


def checked(key: str) -> str:
    """``key`` itself, unless it could name something outside the store (UnsafePathError).

    Every storage passes each key through this: keys are built here from checked parts, and
    this is the last guard that nothing outside a store's root is read, written or deleted.
    """
    if key.startswith("/") or "\x00" in key or any(p in ("", ".", "..") for p in key.split("/")):
        raise UnsafePathError(f"store key {key[:200]!r} would leave the store; refusing")
    return key


def names_by_snapshot(
    found: Iterable[str], parse: Callable[[str], tuple[str, str] | None]
) -> dict[str, set[str]]:
    """Keys of one ``<folder>/<snapshot id>…<name>`` kind (tombstones, holds) grouped by snapshot
    id, read with that kind's own parser; keys it does not parse are left out."""
    grouped: dict[str, set[str]] = {}
    for key in found:
        parsed = parse(key)
        if parsed is not None:
            grouped.setdefault(parsed[0], set()).add(parsed[1])
    return grouped


def _id_in(key: str, folder: str) -> str | None:
    found, _, name = key.partition("/")
    if found != folder or not name.endswith(_JSON):
        return None
    snapshot_id = name[: -len(_JSON)]
    return snapshot_id if is_snapshot_id(snapshot_id) else None


def _token() -> str:
    """16 random hex digits (``secrets.token_hex(8)``, without importing ``secrets``, whose
    ``random`` and ``hmac`` every command would import for nothing)."""
    return os.urandom(8).hex()
