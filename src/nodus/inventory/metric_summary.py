"""The metrics the page's lists compare: per run, its headline metric (loss, else reward),
newest and best over every logged step, and each snapshot's metrics and commit time.

The curves are :mod:`nodus.inventory.plot`'s (what ``runs plot`` and the metrics page draw:
the Trainer's log history in the newest snapshot, or what the attempts logged). A stopped run's
curves no longer change, so they are kept in ``cache`` (the caller's, e.g. the page's client)
and read once; a run that goes on is read again each time. The snapshots come from one
listing per store, as :mod:`nodus.inventory.overview` counts bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nodus.errors import NodusError
from nodus.store.restorable import current

if TYPE_CHECKING:
    from nodus.inventory.refs import Lookup

__all__ = [
    "HEADLINES",
    "curve_summary",
    "headline",
    "logged_at",
    "run_metrics",
    "summarize",
]

# The metric a list compares runs by, in order of preference, and which way is better.
HEADLINES = (("loss", min), ("reward", max))


def headline(names: list[str] | set[str]) -> str | None:
    """The metric a run is compared by: ``loss`` where logged, else ``reward`` (a method that
    logs reward, e.g. GRPO), else None."""
    return next((name for name, _ in HEADLINES if name in names), None)


def summarize(points: list[tuple[int, dict[str, Any]]]) -> dict[str, Any] | None:
    """``{metric, newest, newest_step, best, best_step}`` from ``(step, metrics)`` in step
    order; None where no point holds a headline metric (a finite number)."""
    usable = [(step, m) for step, m in points if any(_finite(v) for v in m.values())]
    name = headline({k for _, m in usable for k, v in m.items() if _finite(v)})
    if name is None:
        return None
    values = [(step, float(m[name])) for step, m in usable if _finite(m.get(name))]
    better = dict(HEADLINES)[name]
    best_step, best = better(values, key=lambda pair: pair[1])
    newest_step, newest = values[-1]
    return {
        "metric": name,
        "newest": newest,
        "newest_step": newest_step,
        "best": best,
        "best_step": best_step,
    }


def curve_summary(series: list[dict[str, Any]]) -> dict[str, Any] | None:
    """:func:`summarize` over the curves of :func:`nodus.inventory.plot.series_json`: the
    last stage that logged a headline metric (a fine-tune's, not its export's), named."""
    for stage in reversed(series):
        by_step: dict[int, dict[str, Any]] = {}
        for name, points in stage["curves"].items():
            for step, value in points:
                by_step.setdefault(step, {})[name] = value
        found = summarize(sorted(by_step.items()))
        if found is not None:
            return {**found, "stage": stage["stage"]}
    return None


def logged_at(series: list[dict[str, Any]], stage: str | None, step: int | None) -> dict[str, Any]:
    """Each curve's value at ``step`` of ``stage`` (its newest point at or before it): what
    the program had logged when a snapshot without metrics of its own was saved."""
    if step is None:
        return {}
    values = {}
    for one in series:
        if one["stage"] != stage:
            continue
        for name, points in one["curves"].items():
            before = [value for at, value in points if at <= step]
            if before:
                values[name] = before[-1]
    return values


def run_metrics(
    lookup: Lookup, runs: list[Any], cache: dict[tuple[str, str], Any]
) -> dict[str, dict[str, Any]]:
    """Per run id: ``summary`` (:func:`curve_summary`, or None) and ``snapshots``
    (``{id: {stage, attempt, step, created, metrics, logged}}``, every current snapshot: a
    counted one's step None; ``logged``: :func:`logged_at` its step); a run whose store
    cannot be read has no snapshots."""
    snapshots = _snapshots(lookup, runs)
    out = {}
    for run in runs:
        series = _curves(lookup, run, cache)
        mine = snapshots.get(run.id, {})
        for snap in mine.values():
            snap["logged"] = logged_at(series, snap["stage"], snap["step"])
        out[run.id] = {"summary": curve_summary(series), "snapshots": mine}
    return out


def _curves(lookup: Lookup, run: Any, cache: dict[tuple[str, str], Any]) -> list[dict[str, Any]]:
    from nodus.inventory.plot import collect, series_json

    key = (run.id, str(run.updated_at))
    if key in cache:
        return list(cache[key])
    try:
        found = series_json(collect(lookup.store_of_run(run), lookup.catalog, run))
    except (NodusError, OSError):  # nothing logged or saved yet, or a store out of reach
        found = []
    if run.phase.stopped:  # its curves are final
        cache[key] = found
    return found


def _snapshots(lookup: Lookup, runs: list[Any]) -> dict[str, dict[str, Any]]:
    wanted: dict[str, set[str]] = {}
    for run in runs:
        wanted.setdefault(lookup.explicit_store or run.store, set()).add(run.id)
    out: dict[str, dict[str, Any]] = {}
    for url, ids in wanted.items():
        try:
            manifests = lookup.store(url).list(role=None)
        except (NodusError, OSError):  # an unreachable store: its runs' cells stay empty
            continue
        for m in current(manifests):
            if m.run in ids:
                out.setdefault(m.run, {})[m.id] = {
                    "stage": m.stage,
                    "attempt": m.attempt,
                    "step": None if m.counted else m.step,
                    "created": m.created,
                    "metrics": dict(m.metrics),
                }
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
