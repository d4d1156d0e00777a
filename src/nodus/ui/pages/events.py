"""A run's events on its page: the newest :data:`MAX_EVENTS`, newest first, filterable by type
(checkboxes ``ui.js`` acts on), retention's deletions collapsed into one row that expands, and
each event's details as ``key: value`` fields rather than JSON.

What is grouped and how details read are pure functions over the ``runs get --json`` events
(:func:`grouped`, :func:`detail_fields`), tested as tables."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.layout import metric_text, when

__all__ = ["COLLAPSED", "MAX_EVENTS", "Group", "detail_fields", "events_section", "grouped"]

MAX_EVENTS = 500  # the newest events a run page lists
COLLAPSED = {"snapshot_kind_deleted": "retention deletion"}
"""Event types shown as one row that expands, with the words that count them."""
_PLACE = ("type", "at", "stage", "attempt")  # an event's columns, not its details
_WIDE = 12  # a nested mapping with more entries than this is counted, not spelled out


@dataclass
class Group:
    """The events of one collapsed type: one row, at the place of the newest of them."""

    type: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        words = COLLAPSED[self.type]
        return f"{len(self.events)} {words}{'' if len(self.events) == 1 else 's'}"


def grouped(events: list[dict[str, Any]]) -> list[dict[str, Any] | Group]:
    """``events`` newest first, those of a :data:`COLLAPSED` type gathered into one
    :class:`Group` per type, standing where the newest of them stands."""
    rows: list[dict[str, Any] | Group] = []
    groups: dict[str, Group] = {}
    for event in reversed(events):
        kind = event["type"]
        if kind not in COLLAPSED:
            rows.append(event)
            continue
        if kind not in groups:
            groups[kind] = Group(kind)
            rows.append(groups[kind])
        groups[kind].events.append(event)
    return rows


def detail_fields(event: dict[str, Any]) -> list[tuple[str, str]]:
    """An event's details as ``(key, text)`` pairs, sorted by key: a nested mapping's entries
    under dotted keys (one wider than :data:`_WIDE` counted instead), a list's items joined."""
    fields: list[tuple[str, str]] = []
    for key in sorted(k for k in event if k not in _PLACE):
        _add(fields, key, event[key])
    return fields


def _add(fields: list[tuple[str, str]], key: str, value: Any) -> None:
    if isinstance(value, dict):
        if not value:
            fields.append((key, "–"))
        elif len(value) > _WIDE:
            fields.append((key, f"{len(value)} entries"))
        else:
            for name in sorted(value):
                _add(fields, f"{key}.{name}", value[name])
        return
    fields.append((key, _text(value)))


def _text(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(item) for item in value) or "–"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)  # inside a list: rare, kept exact
    return metric_text(value)


def events_section(events: list[dict[str, Any]]) -> Markup:
    """The heading, the type filter, and the table."""
    shown = events[-MAX_EVENTS:]
    counts = Counter(event["type"] for event in shown)
    heading = tag("h2", {"id": "events"}, f"Events ({len(events)})")
    if not shown:
        return join([heading, tag("p", {"class": "empty"}, "No events.")])
    note = (
        tag("p", {"class": "note"}, f"the newest {MAX_EVENTS} of {len(events)}")
        if len(events) > MAX_EVENTS
        else Markup()
    )
    rows: list[Markup] = []
    for row in grouped(shown):
        rows.extend(_group_rows(row) if isinstance(row, Group) else [_row(row)])
    header = ("at", "type", "stage", "attempt", "details")
    table = tag(
        "table",
        {"class": "events"},
        tag("thead", None, tag("tr", None, *[tag("th", None, h) for h in header])),
        tag("tbody", None, *rows),
    )
    return join([heading, _filter(counts), note, table])


def _filter(counts: Counter[str]) -> Markup:
    boxes = [
        tag(
            "label",
            None,
            tag("input", {"type": "checkbox", "data_event_type": kind, "checked": True}),
            f" {kind} ({count})",
        )
        for kind, count in sorted(counts.items())
    ]
    return tag(
        "fieldset",
        {"class": "event-filter"},
        tag("legend", None, "show types"),
        tag("button", {"type": "button", "class": "all", "data_events": "all"}, "all"),
        tag("button", {"type": "button", "class": "none", "data_events": "none"}, "none"),
        *boxes,
    )


def _row(event: dict[str, Any], group: str | None = None) -> Markup:
    fields = [
        tag("span", {"class": "field"}, tag("span", {"class": "key"}, key), ": ", text)
        for key, text in detail_fields(event)
    ]
    return tag(
        "tr",
        {
            "class": "event grouped" if group else "event",
            "data_type": event["type"],
            "data_group": group,
            "hidden": bool(group),
        },
        tag("td", None, when(event["at"])),
        tag("td", None, event["type"]),
        tag("td", None, event["stage"] or "–"),
        tag("td", {"class": "num"}, event["attempt"] if event["attempt"] is not None else "–"),
        tag("td", {"class": "details"}, *fields),
    )


def _group_rows(group: Group) -> list[Markup]:
    newest = group.events[0]
    head = tag(
        "tr",
        {"class": "event-group", "data_type": group.type, "data_group": group.type},
        tag("td", None, when(newest["at"])),
        tag("td", None, group.type),
        tag("td", None, "–"),
        tag("td", None, "–"),
        tag(
            "td",
            None,
            tag(
                "button",
                {"type": "button", "class": "expand", "aria_expanded": "false"},
                group.label,
            ),
            " (newest first; click to show each)",
        ),
    )
    return [head, *[_row(event, group.type) for event in group.events]]
