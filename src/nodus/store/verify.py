"""``nodus store verify``: check every manifest and every blob, and optionally repair.

Repair never invents data. It removes what would mislead later work: a blob whose contents do
not match its name (a capture would otherwise reuse it and commit a broken snapshot), and the
manifest of a damaged snapshot (set aside under ``quarantine/`` so it is no longer listed and
its blobs become garbage). Leftovers of killed captures are removed once abandoned.

Deletions are not damage: a kind whose deletion has begun is not held, so its missing blobs are
no problem; tombstones and hold records of a snapshot that is gone are garbage (``--repair``
removes them, as ``nodus gc`` does); deletions not yet finished are reported for ``nodus gc``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, SnapshotDamagedError, StoreError
from nodus.store import deletion, keys
from nodus.store import sweep as sweeps
from nodus.store.sweep import Sweep

if TYPE_CHECKING:
    from nodus.store.internals import ReadInternals, Verdict

__all__ = ["MISSING", "VerifyReport", "verify_store"]

MISSING = "is missing"
"""The verdict on a blob that is not there (when listed: deleted since, by a gc)."""


@dataclass
class VerifyReport:
    store: str
    snapshots: int = 0
    files: int = 0
    bytes: int = 0
    blobs: int = 0
    damaged: dict[str, list[str]] = field(default_factory=dict)  # snapshot id -> problems
    # "<name>:<version>" (or the record's key when it cannot be read) -> problems
    damaged_models: dict[str, list[str]] = field(default_factory=dict)
    corrupt_blobs: list[str] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)  # keys of records of snapshots now gone
    pending_deletions: list[str] = field(default_factory=list)  # "<id>.<kind>", for `nodus gc`
    repaired: list[str] = field(default_factory=list)  # what --repair did, one line each
    unrepaired: bool = True  # False once --repair dealt with every problem found

    @property
    def sound(self) -> bool:
        """True when nothing is (any longer) wrong with the store."""
        # A model version is never set aside by --repair: its blobs are gone for good, and
        # only its owner decides to delete it (`nodus models delete`).
        repaired = not (self.damaged or self.corrupt_blobs) or not self.unrepaired
        return repaired and not self.damaged_models

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["unrepaired"]
        data["sound"] = self.sound
        return data

    def lines(self) -> list[str]:
        head = (
            f"{self.store}: {self.snapshots} snapshots ({self.files} files, "
            f"{self.bytes} bytes held), {self.blobs} blobs"
        )
        out = [head]
        for snapshot_id, problems in sorted(self.damaged.items()):
            out.append(f"damaged {snapshot_id}:")
            out.extend(f"  {problem}" for problem in problems)
        for model, problems in sorted(self.damaged_models.items()):
            out.append(f"damaged model version {model}:")
            out.extend(f"  {problem}" for problem in problems)
        out.extend(f"corrupt blob {digest}" for digest in self.corrupt_blobs)
        if self.pending_deletions:
            out.append(
                f"{len(self.pending_deletions)} deletions begun and not finished "
                f"({', '.join(self.pending_deletions)}): `nodus gc` finishes them"
            )
        if self.garbage:
            out.append(
                f"{len(self.garbage)} tombstones and hold records of deleted snapshots: "
                "`nodus gc` or `--repair` removes them"
            )
        out.extend(f"repaired: {line}" for line in self.repaired)
        if not (self.damaged or self.corrupt_blobs or self.damaged_models):
            out.append("all snapshots, model versions and blobs are sound")
        elif self.unrepaired:
            out.append(
                "problems found; `nodus store verify --repair` sets damaged snapshots "
                "aside and removes corrupt blobs"
            )
        return out


def verify_store(store: ReadInternals, repair: bool = False) -> VerifyReport:
    report = VerifyReport(store=store.url)
    verdicts: dict[str, tuple[str | None, int]] = {}
    # Records first: one is only written for a committed snapshot, so a record whose manifest
    # is missing from the later listing is garbage, never a snapshot being committed meanwhile.
    records = _records(store)
    existing = store.ids()
    for snapshot_id in existing:
        _check_snapshot(store, snapshot_id, verdicts, report)
    _check_models(store, verdicts, report)
    for info in store.storage.list(keys.BLOBS):
        digest = keys.hash_of_blob_key(info.key)
        report.blobs += 1
        # "is missing" here means deleted since the listing (by a gc): not a corrupt blob.
        if digest is not None and store.blob_verdict(digest, verdicts) not in (None, MISSING):
            report.corrupt_blobs.append(digest)
    gone = records.keys() - set(existing)
    report.garbage = sorted(key for snapshot_id in gone for key in records[snapshot_id])
    report.pending_deletions = [f"{sid}.{kind}" for sid, kind in deletion.pending(store.storage)]
    if repair:
        _repair(store, report)
    return report


def _check_snapshot(
    store: ReadInternals, snapshot_id: str, verdicts: dict[str, Verdict], report: VerifyReport
) -> None:
    try:
        manifest = store.stored(snapshot_id)
        problems = store.check(snapshot_id, verdicts)
        if problems and store.stored(snapshot_id).deleting != manifest.deleting:
            # A deletion began while we read its blobs: check what it still holds, afresh.
            manifest = store.stored(snapshot_id)
            problems = store.check(snapshot_id, {})
    except NotFoundError:
        return  # deleted while we looked: there is nothing left to verify
    except SnapshotDamagedError as error:
        report.snapshots += 1
        report.damaged[snapshot_id] = [str(error)]
        return
    report.snapshots += 1
    if problems:
        report.damaged[snapshot_id] = problems
        return
    held = manifest.held_files()
    report.files += len(held)
    report.bytes += sum(entry.size for entry in held)


def _check_models(store: ReadInternals, verdicts: dict[str, Verdict], report: VerifyReport) -> None:
    """Every model-version record's blobs: they are held as a snapshot's are (docs/store.md)."""
    versions = []
    for info in store.storage.list(keys.MODELS):
        parsed = keys.model_version_of_key(info.key)
        if parsed is None:
            continue
        try:
            version = store.model_records.read(*parsed)
        except StoreError as error:  # unreadable: its blobs cannot be told, the others can
            report.damaged_models[info.key] = [str(error)]
            continue
        if version is not None:  # None: deleted while we looked
            versions.append(version)
    for version in versions:
        problems = []
        for entry in version.files:
            if entry.is_link:
                continue
            verdict = store.blob_verdict(entry.hash, verdicts)
            if verdict is not None:
                problems.append(f"{entry.path}: blob {entry.hash} {verdict}")
        if problems:
            report.damaged_models[f"{version.name}:{version.version}"] = problems


def _records(store: ReadInternals) -> dict[str, list[str]]:
    """Keys of every tombstone and hold record, by the snapshot id they name."""
    found: dict[str, list[str]] = {}
    for folder, parse in ((keys.TOMBSTONES, keys.tombstone_of_key), (keys.HOLDS, keys.hold_of_key)):
        for info in store.storage.list(folder):
            parsed = parse(info.key)
            if parsed is not None:
                found.setdefault(parsed[0], []).append(info.key)
    return found


def _repair(store: ReadInternals, report: VerifyReport) -> None:
    storage = store.storage
    for digest in report.corrupt_blobs:
        storage.delete(keys.blob_key(digest))
        report.repaired.append(f"removed corrupt blob {digest}")
    for key in report.garbage:
        storage.delete(key)
    if report.garbage:
        report.repaired.append(
            f"removed {len(report.garbage)} tombstones and hold records of deleted snapshots"
        )
    for snapshot_id in sorted(report.damaged):
        try:
            raw = storage.read(keys.manifest_key(snapshot_id))
        except FileNotFoundError:
            continue
        storage.write(keys.quarantine_key(snapshot_id), raw)
        storage.delete(keys.manifest_key(snapshot_id))
        store.forget(snapshot_id)
        report.repaired.append(
            f"set {snapshot_id} aside as {keys.quarantine_key(snapshot_id)} (no longer listed)"
        )
    with Sweep(storage) as sweep:
        if sweep.allowed:
            sweep.remove_leftovers(sweeps.CAPTURE_LEASE_S)
            if sweep.report.removed_leftovers:
                report.repaired.append(
                    f"removed {sweep.report.removed_leftovers} leftovers of killed captures"
                )
    report.unrepaired = False
