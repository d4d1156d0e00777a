"""The runs table of ``nodus ui``: a page of runs, each with its stages, attempts, newest
snapshot and stored bytes, built in a handful of statements whatever the catalog's size.

Each row is :func:`nodus.inventory.runs.run_summary` (a ``runs list --json`` row) with more
fields; nothing here opens a run's store per run: the newest snapshot comes from the catalog's
``snapshot_committed`` events, and the stored bytes from one listing of each store the page's
runs use (its manifests are kept by the store object between pages).
"""

from __future__ import annotations

from typing import Any

from nodus.errors import NodusError, UsageError
from nodus.inventory.glance import run_duration
from nodus.inventory.refs import Lookup
from nodus.inventory.runs import run_summary
from nodus.runner.catalog.phases import Phase

__all__ = ["check_filters", "runs_page"]

MAX_PAGE = 500  # rows one page may ask for


def runs_page(
    lookup: Lookup,
    *,
    limit: int = 100,
    offset: int = 0,
    phase: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """``{total, offset, limit, runs: [...]}``: the newest runs first, filtered."""
    _check(limit, offset, phase)
    catalog = lookup.catalog
    runs = catalog.list_runs(limit, offset=offset, phase=phase, name=name)
    ids = [run.id for run in runs]
    stages = catalog.stages_of(ids)
    newest = catalog.newest_events(ids, "snapshot_committed")
    stored = _stored(lookup, runs)
    rows = [
        _row(catalog.home, run, stages.get(run.id, []), newest.get(run.id), stored.get(run.id))
        for run in runs
    ]
    total = catalog.count_runs(phase=phase, name=name)
    return {"total": total, "offset": offset, "limit": limit, "runs": rows}


def _check(limit: int, offset: int, phase: str | None) -> None:
    if not 0 < limit <= MAX_PAGE:
        raise UsageError(f"limit {limit}: give 1 to {MAX_PAGE}")
    check_filters(offset, phase)


_LARGEST = 2**63 - 1  # the catalog's (SQLite's) largest whole number


def check_filters(offset: int, phase: str | None, limit: int | None = None) -> None:
    """A listing's offset, phase and limit, or the one-line reason they cannot be."""
    if not 0 <= offset <= _LARGEST:
        raise UsageError(f"offset {offset}: give a whole number from 0 to {_LARGEST}")
    if limit is not None and not 0 <= limit <= _LARGEST:
        raise UsageError(f"limit {limit}: give a whole number from 0 to {_LARGEST}")
    phases = [p.value for p in Phase if p is not Phase.PENDING]  # PENDING: stages only
    if phase is not None and phase not in phases:
        raise UsageError(f"phase {phase!r}: one of {', '.join(phases)}")


def _row(home: str, run: Any, stages: list[dict], newest: dict | None, stored: dict | None) -> dict:
    attempts = [a for s in stages for a in s["attempts"]]
    started = min((a["started_at"] for a in attempts), default=None)
    return {
        **run_summary(run, home),
        "started_at": started,
        "finished_at": run.finished_at,
        "duration_seconds": run_duration(started, run.finished_at, run.updated_at, run.phase),
        "stages": [
            {
                "name": s["name"],
                "phase": s["phase"],
                "attempts": len(s["attempts"]),
                "recoveries": s["recoveries"],
            }
            for s in stages
        ],
        "attempts": len(attempts),
        "recoveries": sum(s["recoveries"] for s in stages),
        "newest_snapshot": None
        if newest is None
        else {
            "id": newest["details"].get("snapshot"),
            # a counted step is no step of the program's (docs/recovery.md)
            "step": None if newest["details"].get("counted") else newest["details"].get("step"),
            "capture": newest["details"].get("step") if newest["details"].get("counted") else None,
            "at": newest["at"],
        },
        "stored": stored or {"snapshots": 0, "bytes": 0},
    }


def _stored(lookup: Lookup, runs: list[Any]) -> dict[str, dict[str, int]]:
    """``runs get``'s ``stored`` of each run, from one listing per store (each blob of a run
    counted once, as :func:`nodus.runner.upkeep.gc.run_usage` counts it)."""
    wanted: dict[str, set[str]] = {}
    for run in runs:
        wanted.setdefault(lookup.explicit_store or run.store, set()).add(run.id)
    blobs: dict[str, dict[str, int]] = {}
    counts: dict[str, int] = {}
    for url, ids in wanted.items():
        try:
            manifests = lookup.store(url).list(role=None)
        except (NodusError, OSError):  # an unreachable store: its runs' cells stay empty
            continue
        for manifest in manifests:
            if manifest.run not in ids:
                continue
            counts[manifest.run] = counts.get(manifest.run, 0) + 1
            held = blobs.setdefault(manifest.run, {})
            for entry in manifest.held_files():
                if not entry.is_link:
                    held[entry.hash] = entry.size
    return {
        run_id: {"snapshots": counts[run_id], "bytes": sum(blobs[run_id].values())}
        for run_id in counts
    }
