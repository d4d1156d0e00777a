"""What every page of ``nodus ui`` shares: :class:`Page` (a title, its live part, whether that
part still changes) and the document frame around it, and the small cells the pages draw alike
(a table, a phase, a run's link, a time)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from nodus.ui.html import Markup, join, tag

__all__ = [
    "STOPPED",
    "Page",
    "metric_text",
    "outcome_badge",
    "phase_badge",
    "run_href",
    "seconds",
    "table",
    "when",
    "whole_number",
]

STOPPED = ("PAUSED", "SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED")


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


def table(name: str, header: tuple[str, ...], rows: list[Markup]) -> Markup:
    if not rows:
        return tag("p", {"class": "empty"}, f"No {name}.")
    return tag(
        "table",
        {"class": name},
        tag("thead", None, tag("tr", None, *[tag("th", None, h) for h in header])),
        tag("tbody", None, *rows),
    )


def phase_badge(phase: str, runner: str | None = None) -> Markup:
    """The phase; a run whose runner died says so beside it (nothing moves it any more)."""
    badge = tag("span", {"class": f"phase {phase.lower()}"}, phase)
    if runner != "gone":
        return badge
    return join([badge, " ", tag("span", {"class": "phase failed"}, "runner gone")])


def outcome_badge(outcome: str) -> Markup:
    return tag("span", {"class": f"outcome {outcome.lower()}"}, outcome)


def run_href(run_id: str) -> str:
    return "/runs/" + quote(run_id, safe="")


def when(stamp: str | float | None) -> str:
    """``2026-12-04 07:31:38`` (UTC) from a catalog stamp, or from seconds since the epoch."""
    if stamp is None or stamp == "":
        return "–"
    if isinstance(stamp, (int, float)):
        return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return stamp.replace("T", " ")[:19]


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def metric_text(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def whole_number(text: str | None, default: int) -> int:
    """A count from the query (an offset): never negative; ``default`` when absent or not one."""
    try:
        return max(int(text), 0) if text else default
    except ValueError:
        return default
