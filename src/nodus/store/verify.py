"""``nodus store verify``: check every manifest and every blob, and optionally repair.

Repair never invents data. It removes what would mislead later work: a blob whose contents do
not match its name (a capture would otherwise reuse it and commit a broken snapshot), and the
manifest of a damaged snapshot (set aside under ``quarantine/`` so it is no longer listed and
its blobs become garbage). Leftovers of killed captures are removed once abandoned.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from nodus.errors import SnapshotDamagedError
from nodus.schemas import defaults
from nodus.store import keys
from nodus.store.gc import Sweep

if TYPE_CHECKING:
    from nodus.store.store import SnapshotStore

__all__ = ["VerifyReport", "verify_store"]


@dataclass
class VerifyReport:
    store: str
    snapshots: int = 0
    files: int = 0
    bytes: int = 0
    blobs: int = 0
    damaged: dict[str, list[str]] = field(default_factory=dict)  # snapshot id -> problems
    corrupt_blobs: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # what --repair did, one line each
    unrepaired: bool = True  # False once --repair dealt with every problem found

    @property
    def sound(self) -> bool:
        """True when nothing is (any longer) wrong with the store."""
        return not (self.damaged or self.corrupt_blobs) or not self.unrepaired

    def to_dict(self) -> dict:
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
        out.extend(f"corrupt blob {digest}" for digest in self.corrupt_blobs)
        out.extend(f"repaired: {line}" for line in self.repaired)
        if not (self.damaged or self.corrupt_blobs):
            out.append("all snapshots and blobs are sound")
        elif self.unrepaired:
            out.append(
                "problems found; `nodus store verify --repair` sets damaged snapshots "
                "aside and removes corrupt blobs"
            )
        return out


def verify_store(store: SnapshotStore, repair: bool = False) -> VerifyReport:
    report = VerifyReport(store=store.url)
    verdicts: dict[str, str | None] = {}
    for snapshot_id in store._ids():
        _check_snapshot(store, snapshot_id, verdicts, report)
    for info in store.storage.list(keys.BLOBS):
        digest = keys.hash_of_blob_key(info.key)
        report.blobs += 1
        if digest is not None and store._blob_verdict(digest, verdicts) is not None:
            report.corrupt_blobs.append(digest)
    if repair:
        _repair(store, report)
    return report


def _check_snapshot(store: SnapshotStore, snapshot_id: str, verdicts, report: VerifyReport) -> None:
    report.snapshots += 1
    problems = store.check(snapshot_id, verdicts)
    if problems:
        report.damaged[snapshot_id] = problems
        return
    try:
        manifest = store.get(snapshot_id)
    except SnapshotDamagedError:  # raced with a concurrent repair; already reported there
        return
    held = manifest.held_files()
    report.files += len(held)
    report.bytes += sum(entry.size for entry in held)


def _repair(store: SnapshotStore, report: VerifyReport) -> None:
    storage = store.storage
    for digest in report.corrupt_blobs:
        storage.delete(keys.blob_key(digest))
        report.repaired.append(f"removed corrupt blob {digest}")
    for snapshot_id in sorted(report.damaged):
        try:
            raw = storage.read(keys.manifest_key(snapshot_id))
        except FileNotFoundError:
            continue
        storage.write(keys.quarantine_key(snapshot_id), raw)
        storage.delete(keys.manifest_key(snapshot_id))
        store._manifests.pop(snapshot_id, None)
        report.repaired.append(
            f"set {snapshot_id} aside as {keys.quarantine_key(snapshot_id)} (no longer listed)"
        )
    with Sweep(storage) as sweep:
        if sweep.allowed:
            sweep.remove_leftovers(defaults.CAPTURE_LEASE_S)
            if sweep.report.removed_leftovers:
                report.repaired.append(
                    f"removed {sweep.report.removed_leftovers} leftovers of killed captures"
                )
    report.unrepaired = False
