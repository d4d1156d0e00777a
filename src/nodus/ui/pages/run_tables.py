"""The tables of a run's page: its attempts, its snapshots, the upload queue, each attempt's
program output (followed live while it runs, through ``/api/output``; its bytes as written
through ``/api/output/raw``); its events are :mod:`nodus.ui.pages.events`."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from nodus.client import Client
from nodus.inventory.runs import host_text, restored_text, step_text
from nodus.schemas.units import human_bytes
from nodus.ui.html import Markup, join, tag
from nodus.ui.pages.layout import metric_text, outcome_badge, table, when

__all__ = ["attempts_table", "outputs", "snapshots_table", "uploads"]


def attempts_table(run: dict[str, Any]) -> Markup:
    rows = []
    for stage in run["stages"]:
        for attempt in stage["attempts"]:
            restored = restored_text(attempt)
            rows.append(
                tag(
                    "tr",
                    {"class": "attempt"},
                    tag("td", None, stage["name"]),
                    tag("td", {"class": "num"}, attempt["number"]),
                    tag("td", None, outcome_badge(attempt["outcome"] or "running")),
                    tag("td", None, attempt["detail"] or "–"),
                    tag("td", None, "–" if restored is None else restored),
                    tag("td", None, when(attempt["started_at"])),
                    tag("td", None, when(attempt["ended_at"]) if attempt["ended_at"] else "–"),
                    tag("td", None, host_text(attempt) or "–"),
                )
            )
    header = ("stage", "attempt", "outcome", "why", "restored", "started", "ended", "host")
    return table("attempts", header, rows)


def snapshots_table(snapshots: list[dict[str, Any]]) -> Markup:
    rows = []
    for snap in snapshots:
        kinds = ", ".join(f"{k} {human_bytes(v)}" for k, v in snap["bytes_by_kind"].items())
        holds = ", ".join(sorted({h["type"] for h in snap["holds"]})) or "–"
        metrics = ", ".join(
            f"{k} {metric_text(v)}" for k, v in sorted(snap["metrics"].items()) if k != "epoch"
        )
        rows.append(
            tag(
                "tr",
                # the models page links a version to its snapshot's row (#snapshot-ID)
                {"class": "snapshot", "id": f"snapshot-{snap['id']}"},
                tag("td", {"class": "num"}, step_text(snap) if snap["capture"] else snap["step"]),
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
    return table("snapshots", header, rows)


def uploads(run: dict[str, Any]) -> Markup:
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


def outputs(client: Client, run: dict[str, Any]) -> Markup:
    blocks = []
    for stage in run["stages"]:
        for attempt in stage["attempts"]:
            piece = client.output(run["id"], stage["name"], attempt["number"])
            text = "".join(line + "\n" for line in piece["lines"])
            where = {"run": run["id"], "stage": stage["name"], "attempt": str(attempt["number"])}
            follow = {**where, "offset": str(piece["next_offset"])}
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
                    _raw_link(where),
                )
            )
    return join(blocks) or tag("p", {"class": "empty"}, "No output yet.")


def _raw_link(where: dict[str, str]) -> Markup:
    """The attempt's output as the program wrote it: the lines above are what a terminal would
    show (a progress bar's last frame, no escape sequences), this keeps every byte."""
    return tag(
        "p",
        {"class": "raw"},
        tag(
            "a",
            {"href": "/api/output/raw?" + urlencode(where), "download": True, "rel": "raw"},
            "raw output (every byte, progress bars' frames and escapes included)",
        ),
    )
