"""The metrics the page's lists compare: per run, its headline metric (loss, else reward) at
its newest snapshot and at its best one, and each snapshot's metrics and commit time.

Read from the snapshots' manifests (the metrics the program had logged at each save), from one
listing per store, as :mod:`nodus.inventory.overview` counts bytes: a page of 100 runs costs no
read of any program's logs. What it says is therefore "at a snapshot": the best loss a run can
be restored to, not a value logged between two saves (the metrics page draws those).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from nodus.errors import NodusError
from nodus.store.restorable import current

if TYPE_CHECKING:
    from nodus.inventory.refs import Lookup

__all__ = ["HEADLINES", "headline", "run_metrics", "summarize"]

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


def run_metrics(lookup: Lookup, runs: list[Any]) -> dict[str, dict[str, Any]]:
    """Per run id: ``summary`` (:func:`summarize` over its snapshots with a step, or None) and
    ``snapshots`` (``{id: {stage, attempt, step, created, metrics}}``; a counted one's step None), every current snapshot), from one
    listing per store; a run whose store cannot be read is left out."""
    wanted: dict[str, set[str]] = {}
    for run in runs:
        wanted.setdefault(lookup.explicit_store or run.store, set()).add(run.id)
    found: dict[str, list[Any]] = {}
    for url, ids in wanted.items():
        try:
            manifests = lookup.store(url).list(role=None)
        except (NodusError, OSError):  # an unreachable store: its runs' cells stay empty
            continue
        for manifest in current(manifests):
            if manifest.run in ids:
                found.setdefault(manifest.run, []).append(manifest)
    out = {}
    for run_id, manifests in found.items():
        stepped = sorted(
            (m for m in manifests if m.step is not None and not m.counted),
            key=lambda m: (m.step, m.created),
        )
        out[run_id] = {
            "summary": summarize([(m.step, m.metrics) for m in stepped]),
            "snapshots": {
                m.id: {
                    "stage": m.stage,
                    "attempt": m.attempt,
                    "step": None if m.counted else m.step,
                    "created": m.created,
                    "metrics": dict(m.metrics),
                }
                for m in manifests
            },
        }
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
