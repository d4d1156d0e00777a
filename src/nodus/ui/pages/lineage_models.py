"""The lineage page (``/lineage``) and the models page (``/models``): the runs started from
other runs' snapshots under their parents, and the model registry's versions."""

from __future__ import annotations

from nodus.client import Client
from nodus.schemas.units import human_bytes
from nodus.ui.html import tag
from nodus.ui.pages.layout import STOPPED, Page, phase_badge, run_href, table, when

__all__ = ["lineage_page", "models_page"]


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
                tag("a", {"href": run_href(run["id"])}, run["id"]),
                " ",
                run["name"],
                " ",
                phase_badge(run["phase"]),
                origin,
            )
        )
    body = (
        tag("ul", {"class": "tree"}, *items)
        if items
        else tag("p", {"class": "empty"}, "No run was started from another run's snapshot yet.")
    )
    changing = any(run["phase"] not in STOPPED for run in runs)
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
            tag("td", None, tag("a", {"href": run_href(model["run"])}, model["run"])),
            tag("td", {"class": "num"}, model["step"]),
            tag("td", {"class": "num"}, "–" if model["epoch"] is None else f"{model['epoch']:.2f}"),
            tag("td", {"class": "num"}, human_bytes(model["bytes"] or 0)),
            tag("td", None, when(model["registered_at"])),
        )
        for model in client.models()
    ]
    header = ("name", "version", "aliases", "origin", "run", "step", "epoch", "size", "registered")
    body = (
        table("models", header, rows)
        if rows
        else tag("p", {"class": "empty"}, "No model is registered yet.")
    )
    return Page("Models", body, False, "models")
