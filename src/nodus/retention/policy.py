"""Which artifact kinds of a run's checkpoints go: rotation at every commit, expiry after a run.

Pure functions over committed manifests and their holds, no I/O: the caller lists the
snapshots, asks :func:`nodus.retention.holds.run_holds`, and hands each :class:`Deletion` to
the store. Sources and outputs are never considered (only ``role == "checkpoint"``), and no
kind any hold names is ever returned, nor a kind the manifest no longer holds.

Like orbax's preservation policies, a decision is the union of small keep-policies: each one
picks the ``(snapshot, kind)`` pairs it keeps, and whatever none keeps goes, except a kind a
hold names (pin, epoch, resume target, model, branch), which no policy can let go. Rotation
(docs/recovery.md) applies two, per stage, ranking snapshots by
:func:`nodus.store.restorable.by_recency` (the latest attempt's count as the newest, so after
``runs resume --step 10`` the new attempt's saves are newer than the old attempt's later ones):

- :class:`KeepRecoverable`: the ``keep_recoverable`` newest snapshots that can continue
  training and whose training state no hold names (a held one is skipped, not counted: the
  resume target is held, so the newest unheld one stays as a fallback should the target turn
  out damaged). Such a snapshot keeps every kind, weights included: a restore lays them all
  down, and no trainer resumes from optimizer state without the model it belongs to.
- :class:`KeepWeights`: the weights of the ``keep_adapters`` newest snapshots whose weights no
  hold names (an epoch save's held weights do not count).

A capture superseded by a newer one of the same attempt and step
(:func:`nodus.store.restorable.current`) ranks nowhere, so it loses every unheld kind.

Training state is every kind but ``weights``: ``state``, and ``files``, which is the whole
recovery state of a directory-contract snapshot and, next to an integration's ``state``, part
of what its restore needs (the identity record), so the two go together and a snapshot never
keeps half of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nodus.retention.holds import Hold, protected_kinds
from nodus.store.kinds import KIND_WEIGHTS
from nodus.store.restorable import by_recency, current, holds_training_state

__all__ = ["Deletion", "KeepPolicy", "KeepRecoverable", "KeepWeights", "expiry", "rotation"]

DAY_S = 86_400.0

Pair = tuple[str, str]  # (snapshot id, kind)
Protected = Mapping[str, set[str]]  # snapshot id -> kinds its holds name
KeepPolicy = Callable[[Sequence[Any], Protected], set[Pair]]
"""(snapshots ranked newest first, protected kinds) -> the pairs the policy keeps."""


@dataclass(frozen=True)
class Deletion:
    """One kind of one snapshot that retention deletes, and why."""

    snapshot_id: str
    kind: str
    step: int | None
    reason: str  # "rotation" | "expiry"


@dataclass(frozen=True)
class KeepRecoverable:
    """Every kind of the ``count`` newest restorable snapshots whose training state is unheld.

    A snapshot whose training state a hold names even in part is skipped, not counted, and
    keeps all of it: a restore needs every piece.
    """

    count: int

    def __call__(self, ranked: Sequence[Any], protected: Protected) -> set[Pair]:
        held = [m for m in ranked if _training_state(m) & protected[m.id]]
        candidates = [m for m in ranked if holds_training_state(m) and m not in held]
        kept = {(m.id, kind) for m in candidates[: self.count] for kind in m.kinds}
        return kept | {(m.id, kind) for m in held for kind in _training_state(m)}


@dataclass(frozen=True)
class KeepWeights:
    """The weights of the ``count`` newest snapshots whose weights are unheld."""

    count: int

    def __call__(self, ranked: Sequence[Any], protected: Protected) -> set[Pair]:
        candidates = [
            m for m in ranked if KIND_WEIGHTS in m.kinds and KIND_WEIGHTS not in protected[m.id]
        ]
        return {(m.id, KIND_WEIGHTS) for m in candidates[: self.count]}


def rotation(
    manifests: Iterable[Any],
    holds_by_id: Mapping[str, Sequence[Hold]],
    *,
    keep_recoverable: int,
    keep_adapters: int,
) -> list[Deletion]:
    """What rotation deletes, stage by stage, from ``manifests`` (the checkpoints of one run)."""
    policies = (KeepRecoverable(keep_recoverable), KeepWeights(keep_adapters))
    deletions: list[Deletion] = []
    for stage in _by_stage(_checkpoints(manifests)):
        ranked = by_recency(current(stage))
        deletions += _unkept(stage, ranked, holds_by_id, policies, "rotation")
    return deletions


def expiry(
    manifests: Iterable[Any],
    holds_by_id: Mapping[str, Sequence[Hold]],
    *,
    finished_at: float | datetime | str | None,
    retention_days: float,
    now: float | datetime | str,
) -> list[Deletion]:
    """Every unheld kind of a finished run's checkpoints once ``retention_days`` have passed.

    ``finished_at`` is when the run finished (None: it has not, and nothing expires); times
    are seconds since the epoch, datetimes, or ISO 8601 text as the catalog stores them.
    ``retention_days = 0`` expires them at once.
    """
    if finished_at is None or _seconds(now) < _seconds(finished_at) + retention_days * DAY_S:
        return []
    checkpoints = _checkpoints(manifests)
    return _unkept(checkpoints, checkpoints, holds_by_id, (), "expiry")


# --- helpers ------------------------------------------------------------------------------------


def _unkept(
    manifests: list[Any],
    ranked: Sequence[Any],
    holds_by_id: Mapping[str, Sequence[Hold]],
    policies: Sequence[KeepPolicy],
    reason: str,
) -> list[Deletion]:
    """The kinds ``manifests`` hold that no hold names and no policy keeps, in their order."""
    protected = {m.id: protected_kinds(holds_by_id.get(m.id, ())) for m in manifests}
    kept: set[Pair] = set()
    for policy in policies:
        kept |= policy(ranked, protected)
    return [
        Deletion(m.id, kind, m.step, reason)
        for m in manifests
        for kind in m.kinds
        if kind not in protected[m.id] and (m.id, kind) not in kept
    ]


def _training_state(manifest: Any) -> set[str]:
    return set(manifest.kinds) - {KIND_WEIGHTS}


def _checkpoints(manifests: Iterable[Any]) -> list[Any]:
    return [m for m in manifests if m.role == "checkpoint"]


def _by_stage(manifests: list[Any]) -> list[list[Any]]:
    """Groups per (run, stage), in the order they first appear."""
    groups: dict[tuple[str, str | None], list[Any]] = {}
    for manifest in manifests:
        groups.setdefault((manifest.run, manifest.stage), []).append(manifest)
    return list(groups.values())


def _seconds(value: float | datetime | str) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return float(value)
