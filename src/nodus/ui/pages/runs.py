"""The runs page (``/``): every run, newest first, a page at a time, filtered by phase and by a
text in its name, id or key; one row each from :meth:`nodus.Client.runs_page`, with its loss
(or reward) from :meth:`nodus.Client.run_metrics`; every column sorts (``ui.js``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from nodus.client import Client
from nodus.inventory.runs import step_text
from nodus.schemas.units import human_bytes, human_duration
from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.layout import Page, metric_text, phase_badge, run_href, when, whole_number

__all__ = ["HEADER", "PAGE_SIZE", "runs_page", "zoned"]

PAGE_SIZE = 100


def runs_page(client: Client, query: dict[str, str]) -> Page:
    """Every run, newest first, a page at a time, filtered by phase and name."""
    phase = query.get("phase") or None
    name = query.get("name") or None
    offset = whole_number(query.get("offset"), 0)
    data = client.runs_page(PAGE_SIZE, offset=offset, phase=phase, name=name)
    metrics = client.run_metrics([run["id"] for run in data["runs"]]) if data["runs"] else {}
    rows = [_run_row(run, metrics.get(run["id"], {}).get("summary")) for run in data["runs"]]
    header = tag(
        "tr",
        None,
        *[tag("th", {"title": words} if words else None, text) for text, words in HEADER],
    )
    table = tag(
        "table",
        {"class": "runs sortable"},
        tag("thead", None, header),
        tag("tbody", None, *rows),
    )
    empty = tag("p", {"class": "empty"}, "No runs match.") if not rows else Markup()
    live = join([_filters(client, phase, name), _pager(data, phase, name), table, empty])
    changing = True  # new runs may start at any time
    return Page("Runs", live, changing, "runs")


_AT_SNAPSHOTS = "the loss (or a reward method's reward) in the metrics of its snapshots"
HEADER = (
    ("run", ""),
    ("name", ""),
    ("phase", ""),
    ("key", ""),
    ("started", ""),
    ("duration", ""),
    ("stages", ""),
    ("attempts", ""),
    ("recoveries", ""),
    ("newest snapshot", ""),
    ("loss: newest", f"{_AT_SNAPSHOTS}: at the newest one"),
    ("loss: best", f"{_AT_SNAPSHOTS}: the best (lowest loss, highest reward)"),
    ("stored", ""),
)  # a click on a heading sorts the rows by it (ui.js), a second click the other way


def _run_row(run: dict[str, Any], summary: dict[str, Any] | None) -> Markup:
    newest = run["newest_snapshot"]
    stages = join(
        [tag("span", {"class": "stage"}, f"{s['name']}: {s['phase']}") for s in run["stages"]],
        " ",
    )
    return tag(
        "tr",
        {"class": "run", "data_phase": run["phase"]},
        tag("td", None, tag("a", {"href": run_href(run["id"])}, run["id"])),
        tag("td", None, run["name"]),
        tag("td", None, phase_badge(run["phase"], run["runner"])),
        tag("td", None, run["key"] or "–"),
        tag("td", {"data_sort": run["started_at"] or ""}, zoned(run["started_at"])),
        _number_cell(human_duration(run["duration_seconds"]), run["duration_seconds"]),
        tag("td", None, stages),
        tag("td", {"class": "num"}, run["attempts"]),
        tag("td", {"class": "num"}, run["recoveries"]),
        tag(
            "td",
            {"data_sort": "" if newest is None else newest["at"]},
            "–" if newest is None else f"{step_text(newest)} · {zoned(newest['at'])}",
        ),
        *_metric_cells(summary),
        _number_cell(human_bytes(run["stored"]["bytes"]), run["stored"]["bytes"]),
    )


def _metric_cells(summary: dict[str, Any] | None) -> list[Markup]:
    """The newest and the best value of the run's loss (a reward method's reward, named)."""
    if summary is None:
        return [_number_cell("–", None), _number_cell("–", None)]
    named = "" if summary["metric"] == "loss" else f"{summary['metric']} "
    return [
        _number_cell(
            f"{named}{metric_text(summary[kind])} (step {summary[kind + '_step']})",
            summary[kind],
        )
        for kind in ("newest", "best")
    ]


def _number_cell(text: str, key: float | None) -> Markup:
    return tag("td", {"class": "num nowrap", "data_sort": "" if key is None else repr(key)}, text)


def zoned(stamp: str | float | None) -> str:
    """A catalog time (or seconds since the epoch) with its zone: both are UTC, so the page
    says so."""
    text = when(stamp)
    return text if text == "–" or text.endswith(("UTC", "Z")) else f"{text} UTC"


def _filters(client: Client, phase: str | None, name: str | None) -> Markup:
    options = [tag("option", {"value": ""}, "every phase")] + [
        tag("option", {"value": p, "selected": p == phase}, p) for p in client.phases()
    ]
    return tag(
        "form",
        {"class": "filters", "method": "get", "action": "/"},
        tag("select", {"name": "phase", "aria_label": "phase"}, *options),
        tag("input", {"name": "name", "value": name or "", "placeholder": "name, id or key"}),
        tag("button", {"type": "submit"}, "Filter"),
    )


def _pager(data: dict[str, Any], phase: str | None, name: str | None) -> Markup:
    total, offset, count = data["total"], data["offset"], len(data["runs"])
    shown = f"runs {offset + 1}–{offset + count} of {total:,}" if count else f"0 of {total:,}"
    links = []
    if offset > 0:
        links.append(_page_link("newer", max(offset - PAGE_SIZE, 0), phase, name))
    if offset + count < total:
        links.append(_page_link("older", offset + PAGE_SIZE, phase, name))
    return tag("p", {"class": "pager"}, tag("span", {"class": "count"}, shown), *links)


def _page_link(text: str, offset: int, phase: str | None, name: str | None) -> Markup:
    query = {k: v for k, v in (("phase", phase), ("name", name)) if v}
    if offset:
        query["offset"] = str(offset)
    return tag("a", {"href": "/?" + urlencode(query) if query else "/", "rel": text}, text)
