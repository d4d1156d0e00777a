"""``nodus runs snapshots`` and ``nodus snapshots get``: what a run saved and what holds it.

Both answer from committed manifests only (an interrupted upload is never listed) and report
bytes per kind the way retention left them: a kind whose deletion has begun is left out.
The JSON shapes built here are the documented ``--json`` output (docs/cli.md).
"""

from __future__ import annotations

from typing import Any

from nodus.errors import NotFoundError, UsageError
from nodus.inventory import holds as _holds
from nodus.inventory.refs import Located, Lookup, parse_ref
from nodus.runner.phases import Phase
from nodus.runner.restorable import current

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
    capture, the one a restore would use.
    """
    run = lookup.run(run_ref)
    if stage is not None and stage not in [s["name"] for s in run.stages]:
        names = ", ".join(s["name"] for s in run.stages)
        raise NotFoundError(f"{run.id} has no stage {stage!r} (stages: {names})")
    store = lookup.store_of_run(run)
    all_stages = store.list(run=run.id)
    manifests = current(m for m in all_stages if stage is None or m.stage == stage)
    index = _holds.HoldIndex(store)
    context = _Context(lookup, run, all_stages, index)
    rows = [context.row(m) for m in sort_snapshots(manifests, sort, descending)]
    return run, rows


def run_holds(lookup: Lookup, run: Any) -> dict[str, list[Any]]:
    """Every hold on each committed checkpoint of ``run``: what retention must ask first."""
    store = lookup.store_of_run(run)
    manifests = store.list(run=run.id)
    context = _Context(lookup, run, manifests, _holds.HoldIndex(store))
    return {m.id: context.holds(m) for m in manifests}


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
    siblings = store.list(run=manifest.run) if run is not None else []
    context = _Context(lookup, run, siblings, _holds.HoldIndex(store))
    data = context.row(manifest)
    verdicts: dict[str, str | None] = {}
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
        data["verified"] = entry.hash in verdicts and verdicts[entry.hash] is None
    return data


class _Context:
    """What every row of one run needs: its holds, resume target, branches and model marker."""

    def __init__(self, lookup: Lookup, run: Any | None, manifests: list[Any], index) -> None:
        self.run = run
        self.index = index
        self.resume_target = _holds.resume_target(run, manifests)
        self.model = _run_model(run, manifests)
        self.branches = _branches(lookup, run) if run is not None else {}

    def holds(self, manifest: Any) -> list[Any]:
        return _holds.holds_of(
            manifest,
            self.run,
            self.index,
            resume_target_id=self.resume_target,
            branches=self.branches.get(manifest.id, ()) + self.branches.get(manifest.step, ()),
        )

    def row(self, manifest: Any) -> dict[str, Any]:
        holds = self.holds(manifest)
        return {
            "id": manifest.id,
            "run": manifest.run,
            "stage": manifest.stage,
            "attempt": manifest.attempt,
            "step": manifest.step,
            "epoch": manifest.epoch,
            "created": manifest.created,
            "kinds": list(manifest.kinds),
            "deleted_kinds": _deleted_kinds(manifest),
            "bytes_by_kind": manifest.bytes_by_kind,
            "total_bytes": manifest.total_bytes,
            "metrics": manifest.metrics,
            "pinned": any(hold.type == "pin" for hold in holds),
            "model": manifest.id == self.model,
            "holds": [hold.to_dict() for hold in holds],
        }


def _deleted_kinds(manifest: Any) -> list[str]:
    """Kinds the snapshot saved that retention has deleted (or is deleting)."""
    saved = {entry.kind for entry in manifest.files}
    return sorted(saved & set(manifest.deleting))


def _deletion(record: dict[str, Any]) -> dict[str, Any]:
    return {"reason": record.get("reason"), "at": record.get("at"), "state": record.get("state")}


def _run_model(run: Any | None, manifests: list[Any]) -> str | None:
    """The run's own model: its last stage's save at the run's last update, once it succeeded."""
    if run is None or run.phase != Phase.SUCCEEDED or not run.stages:
        return None
    last = run.stages[-1]["name"]
    weights = [m for m in manifests if m.stage == last and "weights" in m.kinds]
    return weights[-1].id if weights else None


def _branches(lookup: Lookup, run: Any) -> dict[Any, tuple[tuple[str, str], ...]]:
    """Unfinished runs started from a snapshot of ``run``, keyed by snapshot id or by step."""
    found: dict[Any, tuple[tuple[str, str], ...]] = {}
    for other in lookup.catalog.list_runs(limit=10_000):
        source = other.workload.get("resume_from") if not other.phase.final else None
        if not source:
            continue
        try:
            ref = parse_ref(source)
            if ref.snapshot_id is None and lookup.catalog.get_run(ref.run or "").id != run.id:
                continue
        except (UsageError, NotFoundError):
            continue
        key = ref.snapshot_id if ref.snapshot_id is not None else ref.step
        found[key] = found.get(key, ()) + ((other.id, "full-state"),)
    return found
