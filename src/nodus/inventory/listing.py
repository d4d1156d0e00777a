"""``nodus runs snapshots`` and ``nodus snapshots get``: what a run saved and what holds it.

Both answer from committed manifests only (an interrupted upload is never listed) and report
bytes per kind the way retention left them: a kind whose deletion has begun is left out, and a
snapshot with no kind left is no longer listed. What holds a snapshot is
:func:`nodus.retention.holds.run_holds`'s answer. The JSON shapes built here are the documented
``--json`` output (docs/cli.md).
"""

from __future__ import annotations

from typing import Any

from nodus.errors import NotFoundError, UsageError
from nodus.inventory.refs import Located, Lookup
from nodus.retention.holds import HoldIndex
from nodus.retention.holds import run_holds as _run_holds
from nodus.runner.recovery.suspects import EVENT as SUSPECT
from nodus.runner.recovery.suspects import suspected
from nodus.runner.upkeep.lineage import referencing_runs
from nodus.store.restorable import current

__all__ = ["describe", "list_run", "run_holds", "sort_snapshots"]

# Keys a listing can be sorted by besides the logged metrics.
_FIELDS = ("step", "epoch", "attempt", "created")


def list_run(
    lookup: Lookup,
    run_ref: str,
    *,
    stage: str | None = None,
    sort: str | None = None,
    descending: bool = False,
) -> tuple[Any, list[dict[str, Any]]]:
    """The run and one JSON row per committed checkpoint snapshot, in the asked order.

    A step that one attempt captured twice (its folder was rewritten) is one row: the newest
    capture, the one a restore would use. A snapshot retention left no kind of is not a row.
    """
    run = lookup.run(run_ref)
    if stage is not None and stage not in [s["name"] for s in run.stages]:
        names = ", ".join(s["name"] for s in run.stages)
        raise NotFoundError(f"{run.id} has no stage {stage!r} (stages: {names})")
    store = lookup.store_of_run(run)
    all_stages = store.list(run=run.id)
    manifests = current(m for m in all_stages if stage is None or m.stage == stage)
    holds = run_holds(lookup, run, all_stages, HoldIndex(store))
    ordered = sort_snapshots([m for m in manifests if m.kinds], sort, descending)
    marks = suspected(lookup.catalog.events(run.id, types=(SUSPECT,)))
    return run, [_row(m, holds[m.id], marks.get(m.id)) for m in ordered]


def run_holds(
    lookup: Lookup, run: Any | None, manifests: list[Any], index: HoldIndex
) -> dict[str, list[Any]]:
    """Every hold on each of ``manifests`` (committed checkpoints of ``run``)."""
    branches = referencing_runs(lookup.catalog, run) if run is not None else {}
    return _run_holds(run, manifests, index, branches)


def sort_snapshots(manifests: list[Any], key: str | None, descending: bool = False) -> list[Any]:
    """By step (default), a manifest field, or a logged metric; those without it come last."""
    if key is None or key == "step":
        ordered = list(manifests)  # the store's order: step, then commit time
        return list(reversed(ordered)) if descending else ordered
    known = set(_FIELDS) | {name for m in manifests for name in m.metrics}
    if key not in known and manifests:
        raise UsageError(
            f"--sort {key!r}: the snapshots log no such metric; sort by one of "
            f"{', '.join(sorted(known))}"
        )
    having = [m for m in manifests if _value(m, key) is not None]
    lacking = [m for m in manifests if _value(m, key) is None]
    having.sort(key=lambda m: _value(m, key), reverse=descending)
    return having + lacking


def _value(manifest: Any, key: str) -> Any:
    value = getattr(manifest, key) if key in _FIELDS else manifest.metrics.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def describe(lookup: Lookup, located: Located, verify: bool = True) -> dict[str, Any]:
    """``snapshots get --json``: the manifest, per-file verification and every hold."""
    manifest, store, run = located.manifest, located.store, located.run
    index = HoldIndex(store)
    if run is not None and manifest.role == "checkpoint":
        holds = run_holds(lookup, run, store.list(run=manifest.run), index)
    else:  # a source or outputs snapshot, or a run this catalog never saw: stored holds only
        holds = run_holds(lookup, None, [manifest], index)
    marks = {} if run is None else suspected(lookup.catalog.events(run.id, types=(SUSPECT,)))
    data = _row(manifest, holds.get(manifest.id, []), marks.get(manifest.id))
    verdicts: dict[str, tuple[str | None, int]] = {}  # blob -> (its problem, its bytes)
    problems = store.check(manifest.id, verdicts) if verify else []
    data.update(
        role=manifest.role,
        store=store.url,
        deleting=sorted(manifest.deleting),
        deleted={kind: _deletion(record) for kind, record in store.deletions(manifest.id).items()},
        verified=(not problems) if verify else None,
        problems=problems,
    )
    data["files"] = [_file(entry, verdicts, verify, manifest.deleting) for entry in manifest.files]
    return data


def _file(entry: Any, verdicts: dict, verify: bool, deleting: frozenset) -> dict[str, Any]:
    data = entry.to_dict()
    data["held"] = entry.kind not in deleting
    if not verify or not data["held"]:
        data["verified"] = None  # not looked at
    elif entry.is_link:
        data["verified"] = True
    else:
        data["verified"] = verdicts.get(entry.hash) == (None, entry.size)
    return data


def _row(manifest: Any, holds: list[Any], suspect: dict | None = None) -> dict[str, Any]:
    return {
        "id": manifest.id,
        "run": manifest.run,
        "stage": manifest.stage,
        "attempt": manifest.attempt,
        # A step counted by captures is no step of the program's: null, and its count apart.
        "step": None if manifest.counted else manifest.step,
        "capture": manifest.step if manifest.counted else None,
        "step_source": manifest.step_source,
        "epoch": manifest.epoch,
        "created": manifest.created,
        "kinds": list(manifest.kinds),
        "deleted_kinds": _deleted_kinds(manifest),
        "bytes_by_kind": manifest.bytes_by_kind,
        "total_bytes": manifest.total_bytes,
        "metrics": manifest.metrics,
        "pinned": any(hold.type == "pin" for hold in holds),
        "model": any(hold.type == "model" for hold in holds),
        "holds": [hold.to_dict() for hold in holds],
        # a restored attempt failed before it saved: restores pass over it (runner.suspects)
        "suspect": None if suspect is None else _suspect(suspect),
    }


def _suspect(details: dict[str, Any]) -> dict[str, Any]:
    return {"error": details.get("error"), "exit": details.get("exit")}


def _deleted_kinds(manifest: Any) -> list[str]:
    """Kinds the snapshot saved that retention has deleted (or is deleting)."""
    saved = {entry.kind for entry in manifest.files}
    return sorted(saved & set(manifest.deleting))


def _deletion(record: dict[str, Any]) -> dict[str, Any]:
    return {"reason": record.get("reason"), "at": record.get("at"), "state": record.get("state")}
