"""The pages of ``nodus ui``, one function each: data from :class:`nodus.Client`, HTML out.

Every page is a whole document built with :mod:`nodus.ui.html` (each value escaped where it
enters); its changing part sits in ``<div id="live">``, which the page's script fetches again
(``?fragment=1``) while something on it can still change. Nothing here writes: the page has no
control that changes a run.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from nodus.client import Client
from nodus.schemas.units import human_bytes, human_duration
from nodus.ui.charts import Bar, Line, Mark, curve_chart, timeline
from nodus.ui.html import Markup, join, tag

__all__ = ["Page", "lineage_page", "metrics_page", "models_page", "run_page", "runs_page"]

PAGE_SIZE = 100
MAX_EVENTS = 500  # the newest events a run page lists
MAX_CHARTS = 6


class Page:
    """A page: its title, its live part, and whether that part still changes."""

    def __init__(self, title: str, live: Markup, changing: bool, nav: str) -> None:
        self.title, self.live, self.changing, self.nav = title, live, changing, nav

    def document(self, live_url: str) -> Markup:
        links = [
            ("runs", "/", "Runs"),
            ("lineage", "/lineage", "Lineage"),
            ("models", "/models", "Models"),
        ]
        nav = tag(
            "nav",
            None,
            tag("span", {"class": "brand"}, "nodus"),
            *[
                tag("a", {"href": href, "class": "here" if key == self.nav else None}, text)
                for key, href, text in links
            ],
        )
        live = tag(
            "div",
            {"id": "live", "data_live": live_url if self.changing else None},
            self.live,
        )
        return join(
            [
                Markup("<!doctype html>"),
                tag(
                    "html",
                    {"lang": "en"},
                    tag(
                        "head",
                        None,
                        tag("meta", {"charset": "utf-8"}),
                        tag(
                            "meta",
                            {"name": "viewport", "content": "width=device-width, initial-scale=1"},
                        ),
                        tag("title", None, f"{self.title} · nodus"),
                        tag("link", {"rel": "stylesheet", "href": "/assets/ui.css"}),
                        tag("script", {"src": "/assets/ui.js", "defer": True}),
                    ),
                    tag("body", None, nav, tag("main", None, tag("h1", None, self.title), live)),
                ),
            ]
        )


# --- runs ----------------------------------------------------------------------------------------


def runs_page(client: Client, query: dict[str, str]) -> Page:
    """Every run, newest first, a page at a time, filtered by phase and name."""
    phase = query.get("phase") or None
    name = query.get("name") or None
    offset = _int(query.get("offset"), 0)
    data = client.runs_page(PAGE_SIZE, offset=offset, phase=phase, name=name)
    rows = [_run_row(run) for run in data["runs"]]
    header = tag(
        "tr",
        None,
        *[
            tag("th", None, text)
            for text in (
                "run",
                "name",
                "phase",
                "key",
                "started",
                "duration",
                "stages",
                "attempts",
                "recoveries",
                "newest snapshot",
                "stored",
            )
        ],
    )
    table = tag(
        "table",
        {"class": "runs"},
        tag("thead", None, header),
        tag("tbody", None, *rows),
    )
    empty = tag("p", {"class": "empty"}, "No runs match.") if not rows else Markup()
    live = join([_filters(client, phase, name), _pager(data, phase, name), table, empty])
    changing = True  # new runs may start at any time
    return Page("Runs", live, changing, "runs")


def _run_row(run: dict[str, Any]) -> Markup:
    newest = run["newest_snapshot"]
    stages = join(
        [tag("span", {"class": "stage"}, f"{s['name']}: {s['phase']}") for s in run["stages"]],
        " ",
    )
    return tag(
        "tr",
        {"class": "run", "data_phase": run["phase"]},
        tag("td", None, tag("a", {"href": _run_href(run["id"])}, run["id"])),
        tag("td", None, run["name"]),
        tag("td", None, _phase(run["phase"])),
        tag("td", None, run["key"] or "–"),
        tag("td", None, _when(run["started_at"])),
        tag("td", {"class": "num"}, human_duration(run["duration_seconds"])),
        tag("td", None, stages),
        tag("td", {"class": "num"}, run["attempts"]),
        tag("td", {"class": "num"}, run["recoveries"]),
        tag(
            "td", None, "–" if newest is None else f"step {newest['step']} · {_when(newest['at'])}"
        ),
        tag("td", {"class": "num"}, human_bytes(run["stored"]["bytes"])),
    )


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


# --- one run -------------------------------------------------------------------------------------


def run_page(client: Client, ref: str) -> Page:
    """A run: what it is, its failures in words, its attempts on a timeline, its snapshots,
    uploads, events and each attempt's output."""
    run = client.get(ref)
    snapshots = client.snapshots(run["id"])
    parts = [
        _summary(run),
        _failures(run),
        tag("h2", None, "Attempts"),
        _timeline(run),
        _attempts_table(run),
        tag("h2", None, f"Snapshots ({len(snapshots)})"),
        _snapshots_table(snapshots),
        _uploads(run),
        tag("h2", None, "Output"),
        _outputs(client, run),
        tag("h2", None, f"Events ({len(run['events'])})"),
        _events_table(run["events"]),
    ]
    return Page(f"{run['name']} · {run['id']}", join(parts), run["finished_at"] is None, "runs")


def _summary(run: dict[str, Any]) -> Markup:
    stored = run["stored"]
    facts: list[tuple[str, Any]] = [
        ("phase", _phase(run["phase"])),
        ("key", run["key"] or "–"),
        ("created", _when(run["created_at"])),
        ("finished", _when(run["finished_at"]) if run["finished_at"] else "–"),
        ("stored", f"{stored['snapshots']} snapshot(s), {human_bytes(stored['bytes'])}"),
        ("store", run["store"]),
        ("curves", tag("a", {"href": _run_href(run["id"]) + "/metrics"}, "metrics over steps")),
    ]
    if run.get("progress"):
        facts.append(("progress", _progress(run["progress"])))
    if run["pause"]:
        pause = run["pause"]
        facts.append(
            (
                "pause",
                f"--checkpoint {pause['policy']}: {pause['state']}"
                + (
                    f", at step {pause['save']['step']}"
                    if pause["save"]["step"] is not None
                    else ""
                )
                + (", timed out" if pause["timed_out"] else "")
                + (f", failure: {pause['failure']}" if pause["failure"] else ""),
            )
        )
    if run["parent"]:
        parent = run["parent"]
        facts.append(
            (
                "started from",
                join(
                    [
                        tag("a", {"href": _run_href(parent["run"])}, parent["run"]),
                        f" at step {parent['step']} ({parent['mode']})",
                    ]
                ),
            )
        )
    for child in run["children"]:
        facts.append(
            (
                "branch",
                join(
                    [
                        tag("a", {"href": _run_href(child["id"])}, child["id"]),
                        f" {child['name']}, {child['phase']}, from step {child['step']} "
                        f"({child['mode']})",
                    ]
                ),
            )
        )
    if run.get("model"):
        model = run["model"]
        facts.append(("model", f"{model['ref']} (step {model['step']})"))
    items = [join([tag("dt", None, key), tag("dd", None, value)]) for key, value in facts]
    return tag("dl", {"class": "facts"}, *items)


def _progress(progress: dict[str, Any]) -> str:
    parts = []
    if progress["step"] is not None:
        total = progress["total_steps"]
        parts.append(f"step {progress['step']}" + (f" of {total}" if total else ""))
    if progress["loss"] is not None:
        parts.append(f"loss {progress['loss']:.4g}")
    if progress["eta_seconds"] is not None:
        parts.append(f"about {human_duration(progress['eta_seconds'])} left")
    newest = progress["newest_snapshot"]
    if newest:
        parts.append(f"newest snapshot step {newest['step']}")
    return ", ".join(parts) or "starting"


def _failures(run: dict[str, Any]) -> Markup:
    """What went wrong, in words: the run's message, failed captures, attempts that ended
    otherwise than well."""
    said = []
    if run["phase"] in ("FAILED", "INTERRUPTED", "CANCELLED") and run["message"]:
        said.append(f"{run['phase']}: {run['message']}")
    failures = run["capture_failures"]
    if failures["count"]:
        said.append(
            f"{failures['count']} capture(s) failed ({'; '.join(failures['reasons'])}); newest "
            f"committed step: {failures['newest_committed_step']}"
        )
    for stage in run["stages"]:
        for attempt in stage["attempts"]:
            if attempt["outcome"] not in (None, "succeeded") and attempt["detail"]:
                said.append(
                    f"{stage['name']} attempt {attempt['number']} {attempt['outcome']}: "
                    f"{attempt['detail']}"
                )
    if not said:
        return Markup()
    return tag(
        "section", {"class": "failures"}, tag("ul", None, *[tag("li", None, s) for s in said])
    )


def _timeline(run: dict[str, Any]) -> Markup:
    attempts = [(s["name"], a) for s in run["stages"] for a in s["attempts"]]
    if not attempts:
        return tag("p", {"class": "empty"}, "No attempt has started yet.")
    origin = min(_seconds(a["started_at"]) for _, a in attempts)
    now = time.time()
    bars = []
    for stage, attempt in attempts:
        start = _seconds(attempt["started_at"]) - origin
        end = (_seconds(attempt["ended_at"]) if attempt["ended_at"] else now) - origin
        outcome = attempt["outcome"] or "running"
        restored = attempt["restored_step"]
        label = (
            f"#{attempt['number']}: {outcome}"
            + (f", restored step {restored}" if restored is not None else "")
            + (f" ({attempt['detail']})" if attempt["detail"] else "")
        )
        bars.append(Bar(stage, start, end, outcome, label))
    by_attempt = {(stage, a["number"]): bar for (stage, a), bar in zip(attempts, bars)}
    for event in run["events"]:
        bar = by_attempt.get((event["stage"], event["attempt"]))
        kind = _MARKED.get(event["type"])
        if bar is not None and kind is not None:
            words = f"{event['type']} at {event['at']}" + _cause(event)
            bar.marks.append((_seconds(event["at"]) - origin, kind, words))
    total = max(bar.end for bar in bars)
    return timeline(bars, total)


_MARKED = {  # event types (runner.catalog.event_types) drawn on an attempt's bar
    "preemption_notice": "interruption",
    "node_lost": "interruption",
    "runner_lost": "interruption",
    "process_killed": "interruption",
    "pause_accepted": "pause",
    "pause_timed_out": "pause",
    "pause_ended": "pause",
    "parent_restored": "recovery",
    "snapshot_suspect": "recovery",
    "snapshot_committed": "snapshot",
}


def _cause(event: dict[str, Any]) -> str:
    for key in ("reason", "cause", "detail", "error", "message"):
        if event.get(key):
            return f": {event[key]}"
    return ""


def _attempts_table(run: dict[str, Any]) -> Markup:
    rows = []
    for stage in run["stages"]:
        for attempt in stage["attempts"]:
            restored = attempt["restored_step"]
            rows.append(
                tag(
                    "tr",
                    {"class": "attempt"},
                    tag("td", None, stage["name"]),
                    tag("td", {"class": "num"}, attempt["number"]),
                    tag("td", None, _phase_word(attempt["outcome"] or "running")),
                    tag("td", None, attempt["detail"] or "–"),
                    tag("td", None, "–" if restored is None else f"step {restored}"),
                    tag("td", None, _when(attempt["started_at"])),
                    tag("td", None, _when(attempt["ended_at"]) if attempt["ended_at"] else "–"),
                    tag("td", None, attempt["host"] or "–"),
                )
            )
    header = ("stage", "attempt", "outcome", "why", "restored", "started", "ended", "host")
    return _table("attempts", header, rows)


def _snapshots_table(snapshots: list[dict[str, Any]]) -> Markup:
    rows = []
    for snap in snapshots:
        kinds = ", ".join(f"{k} {human_bytes(v)}" for k, v in snap["bytes_by_kind"].items())
        holds = ", ".join(sorted({h["type"] for h in snap["holds"]})) or "–"
        metrics = ", ".join(
            f"{k} {_metric(v)}" for k, v in sorted(snap["metrics"].items()) if k != "epoch"
        )
        rows.append(
            tag(
                "tr",
                {"class": "snapshot"},
                tag("td", {"class": "num"}, snap["step"]),
                tag(
                    "td", {"class": "num"}, "–" if snap["epoch"] is None else f"{snap['epoch']:.2f}"
                ),
                tag("td", {"class": "num"}, snap["attempt"]),
                tag("td", None, kinds or "–"),
                tag("td", None, ", ".join(snap["deleted_kinds"]) or "–"),
                tag("td", None, holds),
                tag("td", None, metrics or "–"),
                tag("td", {"class": "id"}, snap["id"]),
            )
        )
    header = ("step", "epoch", "attempt", "kinds", "deleted", "holds", "metrics", "id")
    return _table("snapshots", header, rows)


def _uploads(run: dict[str, Any]) -> Markup:
    upload = run.get("upload")
    unrecorded = run.get("unrecorded") or []
    if not upload and not unrecorded:
        return Markup()
    said = []
    if upload:
        current = upload["uploading"]
        if current is None:
            said.append("idle")
        else:
            what = "outputs" if current["role"] == "outputs" else f"step {current['step']}"
            said.append(
                f"uploading {what}: {human_bytes(current['bytes_done'])} of "
                f"{human_bytes(current['bytes_total'])}"
            )
        said.append(
            f"{upload['waiting']} waiting, {upload['skipped']} skipped, "
            f"{upload['uploaded']} uploaded"
        )
        if upload.get("error"):
            said.append(f"last error: {upload['error']}")
    if unrecorded:
        said.append(
            "never reached the store: "
            + ", ".join(
                "outputs" if u["role"] == "outputs" else f"step {u['step']}" for u in unrecorded
            )
        )
    return join([tag("h2", None, "Upload queue"), tag("p", {"class": "upload"}, "; ".join(said))])


def _outputs(client: Client, run: dict[str, Any]) -> Markup:
    blocks = []
    for stage in run["stages"]:
        for attempt in stage["attempts"]:
            piece = client.output(run["id"], stage["name"], attempt["number"])
            text = "".join(line + "\n" for line in piece["lines"])
            follow = {
                "run": run["id"],
                "stage": stage["name"],
                "attempt": str(attempt["number"]),
                "offset": str(piece["next_offset"]),
            }
            blocks.append(
                tag(
                    "details",
                    {
                        "class": "output",
                        "id": f"out-{stage['name']}-{attempt['number']}",
                        "open": attempt is stage["attempts"][-1],
                    },
                    tag("summary", None, f"{stage['name']}, attempt {attempt['number']}"),
                    tag(
                        "pre",
                        {
                            "class": "log",
                            "data_follow": "/api/output?" + urlencode(follow)
                            if piece["running"]
                            else None,
                        },
                        text,
                    ),
                )
            )
    return join(blocks) or tag("p", {"class": "empty"}, "No output yet.")


def _events_table(events: list[dict[str, Any]]) -> Markup:
    shown = events[-MAX_EVENTS:]
    rows = []
    for event in reversed(shown):
        details = {k: v for k, v in event.items() if k not in ("type", "at", "stage", "attempt")}
        rows.append(
            tag(
                "tr",
                {"class": "event"},
                tag("td", None, _when(event["at"])),
                tag("td", None, event["type"]),
                tag("td", None, event["stage"] or "–"),
                tag(
                    "td",
                    {"class": "num"},
                    event["attempt"] if event["attempt"] is not None else "–",
                ),
                tag(
                    "td",
                    {"class": "details"},
                    json.dumps(details, sort_keys=True) if details else "",
                ),
            )
        )
    note = (
        tag("p", {"class": "note"}, f"the newest {MAX_EVENTS} of {len(events)}")
        if len(events) > MAX_EVENTS
        else Markup()
    )
    return join([note, _table("events", ("at", "type", "stage", "attempt", "details"), rows)])


# --- metrics ------------------------------------------------------------------------------------


def metrics_page(client: Client, ref: str, other: str | None) -> Page:
    """A run's metric curves per step (per attempt), snapshot and recovery marks; with
    ``other``, that run's curves overlaid."""
    runs = [client.get(ref)]
    if other:
        runs.append(client.get(other))
    series = [client.metrics(run["id"]) for run in runs]
    names: list[str] = []
    for one in series:
        for stage in one:
            names += [n for n in stage["curves"] if n not in names]
    charts = []
    for name in names[:MAX_CHARTS]:
        lines, marks = [], []
        for index, (run, stages) in enumerate(zip(runs, series)):
            for stage in stages:
                lines += _attempt_lines(run, stage, name, index, len(runs) > 1)
                if index == 0:
                    marks += _marks(stage)
        charts.append(curve_chart(name, lines, marks))
    if not charts:
        charts.append(
            tag(
                "p",
                {"class": "empty"},
                "No metrics logged: the program writes no trainer_state.json, so only its "
                f"{sum(len(s['snapshots']) for s in series[0])} snapshot(s) are known.",
            )
        )
    overlay = tag(
        "form",
        {"class": "filters", "method": "get", "action": _run_href(runs[0]["id"]) + "/metrics"},
        tag(
            "input",
            {"name": "with", "value": other or "", "placeholder": "overlay a run: id or key"},
        ),
        tag("button", {"type": "submit"}, "Overlay"),
    )
    back = tag("p", None, tag("a", {"href": _run_href(runs[0]["id"])}, f"← {runs[0]['id']}"))
    title = f"Metrics · {runs[0]['name']}" + (f" vs {runs[1]['name']}" if other else "")
    changing = any(run["finished_at"] is None for run in runs)
    return Page(title, join([back, overlay, *charts]), changing, "runs")


def _attempt_lines(
    run: dict[str, Any], stage: dict[str, Any], name: str, color: int, prefixed: bool
) -> list[Line]:
    """The curve cut where each later attempt restored: one line per attempt."""
    points = [(float(s), float(v)) for s, v in stage["curves"].get(name, [])]
    cuts = [float(step) for step, _ in stage["restarts"]]
    prefix = f"{run['id']} " if prefixed else ""
    lines = []
    bounds = [float("-inf"), *cuts, float("inf")]
    for number, (low, high) in enumerate(zip(bounds, bounds[1:]), start=1):
        mine = [(s, v) for s, v in points if low < s <= high or (number == 1 and s == low)]
        if mine:
            label = f"{prefix}{stage['stage']} attempt {number}"
            # one colour per run and attempt: a run's later attempts dashed, in its next shade
            lines.append(Line(label, 3 * color + min(number - 1, 2), mine, dashed=number > 1))
    return lines


def _marks(stage: dict[str, Any]) -> list[Mark]:
    marks = [
        Mark(float(step), "snapshot", f"snapshot at step {step}") for step, _ in stage["snapshots"]
    ]
    for step, label in stage["restarts"]:
        kind = "recovery" if label.startswith("recovery") else "resume"
        marks.append(Mark(float(step), kind, label))
    return marks


# --- lineage and models -------------------------------------------------------------------------


def lineage_page(client: Client) -> Page:
    """Runs started from other runs' snapshots (``resume_from``, branches), under their parents."""
    runs = client.lineage()
    items = []
    for run in runs:
        parent = run["parent"]
        origin = (
            f" from step {parent['step']} of {parent['run']} ({parent['mode']})" if parent else ""
        )
        items.append(
            tag(
                "li",
                {"class": f"node depth{min(run['depth'], 8)}", "data_depth": run["depth"]},
                tag("a", {"href": _run_href(run["id"])}, run["id"]),
                " ",
                run["name"],
                " ",
                _phase(run["phase"]),
                origin,
            )
        )
    body = (
        tag("ul", {"class": "tree"}, *items)
        if items
        else tag("p", {"class": "empty"}, "No run was started from another run's snapshot yet.")
    )
    changing = any(run["phase"] not in _STOPPED for run in runs)
    return Page("Lineage", body, changing, "lineage")


def models_page(client: Client) -> Page:
    """The model registry: every version with its aliases and where it came from."""
    rows = [
        tag(
            "tr",
            {"class": "model"},
            tag("td", None, model["name"]),
            tag("td", {"class": "num"}, model["version"]),
            tag(
                "td",
                None,
                ", ".join(model["aliases"]) or "–",
                " (newest)" if model["newest"] else "",
            ),
            tag("td", None, model["origin"]),
            tag("td", None, tag("a", {"href": _run_href(model["run"])}, model["run"])),
            tag("td", {"class": "num"}, model["step"]),
            tag("td", {"class": "num"}, "–" if model["epoch"] is None else f"{model['epoch']:.2f}"),
            tag("td", {"class": "num"}, human_bytes(model["bytes"] or 0)),
            tag("td", None, _when(model["registered_at"])),
        )
        for model in client.models()
    ]
    header = ("name", "version", "aliases", "origin", "run", "step", "epoch", "size", "registered")
    body = (
        _table("models", header, rows)
        if rows
        else tag("p", {"class": "empty"}, "No model is registered yet.")
    )
    return Page("Models", body, False, "models")


# --- pieces --------------------------------------------------------------------------------------

_STOPPED = ("PAUSED", "SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED")


def _table(name: str, header: tuple[str, ...], rows: list[Markup]) -> Markup:
    if not rows:
        return tag("p", {"class": "empty"}, f"No {name}.")
    return tag(
        "table",
        {"class": name},
        tag("thead", None, tag("tr", None, *[tag("th", None, h) for h in header])),
        tag("tbody", None, *rows),
    )


def _phase(phase: str) -> Markup:
    return tag("span", {"class": f"phase {phase.lower()}"}, phase)


def _phase_word(outcome: str) -> Markup:
    return tag("span", {"class": f"outcome {outcome.lower()}"}, outcome)


def _run_href(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


def _when(stamp: str | float | None) -> str:
    """``2026-12-04 07:31:38`` (UTC) from a catalog stamp, or from seconds since the epoch."""
    if stamp is None or stamp == "":
        return "–"
    if isinstance(stamp, (int, float)):
        return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return stamp.replace("T", " ")[:19]


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def _metric(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _int(text: str | None, default: int) -> int:
    try:
        return max(int(text), 0) if text else default
    except ValueError:
        return default
