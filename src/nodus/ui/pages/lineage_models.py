"""The lineage page (``/lineage``) and the models page (``/models``): the runs started from
other runs' snapshots under their parents (each a click from its curves over its parent's),
and the model registry's versions with their snapshots and those snapshots' metrics."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from nodus.client import Client
from nodus.schemas.units import human_bytes
from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.layout import STOPPED, Page, metric_text, phase_badge, run_href, table
from nodus.ui.pages.runs import zoned

__all__ = ["MODEL_HEADER", "lineage_page", "metrics_words", "models_page"]


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
                _compare(run),
            )
        )
    body = (
        tag("ul", {"class": "tree"}, *items)
        if items
        else tag("p", {"class": "empty"}, "No run was started from another run's snapshot yet.")
    )
    changing = any(run["phase"] not in STOPPED for run in runs)
    return Page("Lineage", body, changing, "lineage")


def _compare(run: dict[str, Any]) -> Markup:
    """A run started from another: one click to both runs' curves on the same charts."""
    parent = run["parent"]
    if not parent:
        return Markup()
    href = run_href(run["id"]) + "/metrics?" + urlencode({"with": parent["run"]})
    return join([" · ", tag("a", {"href": href, "class": "compare"}, "compare with its parent")])


MODEL_HEADER = (
    "name",
    "version",
    "aliases",
    "origin",
    "run",
    "snapshot",
    "step",
    "epoch",
    "metrics",
    "size",
    "registered",
)


def models_page(client: Client) -> Page:
    """The model registry: every version with its aliases, where it came from, the snapshot
    its weights are (a link to it on its run's page) and that snapshot's metrics (else the
    values its program had logged at that step)."""
    models = client.models()
    known = client.run_metrics(sorted({m["run"] for m in models})) if models else {}
    rows = [
        _model_row(model, known.get(model["run"], {}).get("snapshots", {}).get(model["snapshot"]))
        for model in models
    ]
    body = (
        table("models", MODEL_HEADER, rows)
        if rows
        else tag("p", {"class": "empty"}, "No model is registered yet.")
    )
    return Page("Models", body, False, "models")


def _model_row(model: dict[str, Any], snapshot: dict[str, Any] | None) -> Markup:
    aliases = ", ".join(model["aliases"])
    newest = "newest" if model["newest"] else ""
    link = run_href(model["run"]) + "#snapshot-" + quote(model["snapshot"], safe="")
    return tag(
        "tr",
        {"class": "model"},
        tag("td", None, model["name"]),
        tag("td", {"class": "num"}, model["version"]),
        tag("td", None, " · ".join(x for x in (aliases, newest) if x) or "–"),
        tag("td", None, model["origin"]),
        tag("td", None, tag("a", {"href": run_href(model["run"])}, model["run"])),
        tag(
            "td", {"class": "id"}, tag("a", {"href": link, "class": "snapshot"}, model["snapshot"])
        ),
        tag("td", {"class": "num"}, model["step"]),
        tag("td", {"class": "num"}, "–" if model["epoch"] is None else f"{model['epoch']:.2f}"),
        tag("td", None, metrics_words(_metrics(snapshot))),
        tag("td", {"class": "num"}, human_bytes(model["bytes"] or 0)),
        tag("td", None, zoned(model["registered_at"])),
    )


def _metrics(snapshot: dict[str, Any] | None) -> dict[str, Any]:
    """The snapshot's own metrics, else what its program had logged at its step."""
    if snapshot is None:
        return {}
    return snapshot["metrics"] or snapshot["logged"]


def metrics_words(metrics: dict[str, Any]) -> str:
    """A snapshot's metrics in a cell: the headline ones first (loss, reward, eval loss),
    then the rest by name, ``loss 0.412 · learning_rate 4e-05``; ``–`` for none."""
    first = [n for n in ("loss", "reward", "eval_loss") if n in metrics]
    names = first + sorted(n for n in metrics if n not in first)
    return " · ".join(f"{n} {metric_text(metrics[n])}" for n in names) or "–"
