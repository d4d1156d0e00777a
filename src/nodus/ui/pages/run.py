"""A run's page (``/runs/RUN``): its facts, its banner (:mod:`nodus.ui.pages.banner`), what
ran and what it uses now (:mod:`nodus.ui.pages.what_ran`), its attempts on a timeline; the
tables below them (attempts, snapshots, uploads, output) are :mod:`nodus.ui.pages.run_tables`,
its events :mod:`nodus.ui.pages.events`. The page refreshes itself until the run finishes."""

from __future__ import annotations

import time
from typing import Any

from nodus.client import Client
from nodus.inventory.protection import PROTECTED, protection_line
from nodus.inventory.runs import progress_line, restored_text, runner_line
from nodus.schemas.units import human_bytes
from nodus.ui.charts import Bar, timeline
from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.banner import banner_html
from nodus.ui.pages.events import events_section
from nodus.ui.pages.layout import Page, phase_badge, run_href, seconds, when
from nodus.ui.pages.run_tables import attempts_table, outputs, snapshots_table, uploads
from nodus.ui.pages.what_ran import usage_section, what_ran_section

__all__ = ["run_page"]


def run_page(client: Client, ref: str) -> Page:
    """A run: how it stands in words, what it is, what ran and what it uses now, its attempts on
    a timeline, its snapshots, uploads, events and each attempt's output."""
    run = client.get(ref)
    snapshots = client.snapshots(run["id"])
    parts = [
        banner_html(run),
        _summary(run),
        usage_section(run, client.usage(run["id"])),
        what_ran_section(run, client.workload(run["id"])),
        tag("h2", None, "Attempts"),
        _timeline(run),
        attempts_table(run),
        tag("h2", None, f"Snapshots: {_counted(len(snapshots), 'checkpoint')}"),
        snapshots_table(snapshots),
        uploads(run),
        tag("h2", None, "Output"),
        outputs(client, run),
        events_section(run["events"]),
    ]
    return Page(f"{run['name']} · {run['id']}", join(parts), run["finished_at"] is None, "runs")


def _summary(run: dict[str, Any]) -> Markup:
    stored = run["stored"]
    facts: list[tuple[str, Any]] = [
        ("phase", phase_badge(run["phase"], run["runner"]["state"])),
        ("key", run["key"] or "–"),
        ("created", when(run["created_at"])),
        ("finished", when(run["finished_at"]) if run["finished_at"] else "–"),
        ("stored", _stored(stored)),
        ("store", run["store"]),
        ("curves", tag("a", {"href": run_href(run["id"]) + "/metrics"}, "metrics over steps")),
    ]
    if run.get("progress"):
        facts.append(("progress", progress_line(run["progress"])))  # as `runs get` says it
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
                        tag("a", {"href": run_href(parent["run"])}, parent["run"]),
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
                        tag("a", {"href": run_href(child["id"])}, child["id"]),
                        f" {child['name']}, {child['phase']}, from step {child['step']} "
                        f"({child['mode']})",
                    ]
                ),
            )
        )
    gone = runner_line(run["runner"])
    if gone:
        facts.insert(1, ("runner", gone))
    facts.insert(1, ("protection", _protection(run)))
    if run.get("model"):
        model = run["model"]
        facts.append(("model", f"{model['ref']} (step {model['step']})"))
    items = [join([tag("dt", None, key), tag("dd", None, value)]) for key, value in facts]
    return tag("dl", {"class": "facts"}, *items)


def _protection(run: dict[str, Any]) -> str:
    """The run's protection in words: what a recovery would continue from, or why nothing."""
    guarded = run.get("protection")
    if guarded is None:
        return "–"
    if guarded["state"] == PROTECTED:
        return f"protected: newest snapshot step {guarded['step']} (stage {guarded['stage']})"
    return protection_line(guarded, stopped=run["finished_at"] is not None) or guarded["state"]


def _stored(stored: dict[str, Any]) -> str:
    """``8 checkpoints, the source and the outputs: 12.1 KiB`` — what the store holds of the run,
    each role named (the source is no checkpoint the Snapshots table would list)."""
    roles = dict(stored.get("roles") or {})
    named = [_counted(roles.pop("checkpoint", 0), "checkpoint")]
    named += ["the source"] if roles.pop("source", 0) else []
    named += ["the outputs"] if roles.pop("outputs", 0) else []
    named += [_counted(count, role) for role, count in sorted(roles.items())]
    listed = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]
    return f"{listed}: {human_bytes(stored['bytes'])}"


def _counted(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _timeline(run: dict[str, Any]) -> Markup:
    attempts = [(s["name"], a) for s in run["stages"] for a in s["attempts"]]
    if not attempts:
        return tag("p", {"class": "empty"}, "No attempt has started yet.")
    origin = min(seconds(a["started_at"]) for _, a in attempts)
    now = time.time()
    bars = []
    for stage, attempt in attempts:
        start = seconds(attempt["started_at"]) - origin
        end = (seconds(attempt["ended_at"]) if attempt["ended_at"] else now) - origin
        outcome = attempt["outcome"] or "running"
        restored = restored_text(attempt)
        label = (
            f"#{attempt['number']}: {outcome}"
            + (f", restored {restored}" if restored is not None else "")
            + (f" ({attempt['detail']})" if attempt["detail"] else "")
        )
        bars.append(Bar(stage, start, end, outcome, label))
    by_attempt = {(stage, a["number"]): bar for (stage, a), bar in zip(attempts, bars)}
    for event in run["events"]:
        bar = by_attempt.get((event["stage"], event["attempt"]))
        kind = _MARKED.get(event["type"])
        if bar is not None and kind is not None:
            words = f"{event['type']} at {event['at']}" + _cause(event)
            bar.marks.append((seconds(event["at"]) - origin, kind, words))
    total = max(bar.end for bar in bars)
    return timeline(bars, total)


_MARKED = {  # event types (runner.catalog.event_types) drawn on an attempt's bar
    "preemption_notice": "interruption",
    "node_lost": "interruption",
    "runner_lost": "interruption",
    "process_killed": "interruption",
    "hang_detected": "interruption",
    "pause_accepted": "pause",
    "pause_timed_out": "pause",
    "pause_ended": "pause",
    "parent_restored": "recovery",
    "snapshot_suspect": "recovery",
    "snapshot_committed": "snapshot",
}


def _cause(event: dict[str, Any]) -> str:
    if event["type"] == "hang_detected":
        return (
            f": no progress for {event.get('seconds_without_progress')} s "
            f"(last: {event.get('last_progress')})"
        )
    for key in ("reason", "cause", "detail", "error", "message"):
        if event.get(key):
            return f": {event[key]}"
    return ""
