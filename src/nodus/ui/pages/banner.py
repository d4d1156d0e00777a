"""The banner at the top of a run's page: how the run stands, in sentences, each said once.

A run that failed gets a red one saying what went wrong; a run that succeeded after a
recovery gets a green one that names the recovery (what was interrupted, what was restored),
never a red "what went wrong"; a run that goes on with an attempt behind it that ended badly gets
an amber one. :func:`banner` decides, purely over the ``runs get --json`` shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nodus.inventory.protection import protection_line
from nodus.inventory.runs import restored_text
from nodus.ui.html import Markup, tag

__all__ = ["Banner", "banner", "banner_html"]

_FAILED = ("FAILED", "INTERRUPTED", "CANCELLED")
_WELL = (None, "succeeded", "paused")  # running, or ended as asked: the facts say a pause


@dataclass(frozen=True)
class Banner:
    """``kind``: ``failure`` (red), ``recovered`` (green) or ``notice`` (amber)."""

    kind: str
    sentences: tuple[str, ...]


def banner(run: dict[str, Any]) -> Banner | None:
    """What the banner says of ``run``, or None when there is nothing to say."""
    ended_badly = _attempt_sentences(run)
    message = run["message"] if run["phase"] in _FAILED else None
    said = [sentence for sentence, _ in ended_badly]
    if message:
        # the run's message is most often its last attempt's detail: said once, with the phase
        same = next((s for s, detail in reversed(ended_badly) if detail == message), None)
        if same is not None:
            said.remove(same)
        said.insert(0, f"{run['phase']}: {same or message}")
    weak = protection_line(run.get("protection"), stopped=run["finished_at"] is not None)
    if weak:
        said.append(weak)
    failures = run["capture_failures"]
    if failures["count"]:
        said.append(
            f"{failures['count']} capture(s) failed ({'; '.join(failures['reasons'])}); newest "
            f"committed step: {failures['newest_committed_step']}"
        )
    said = list(dict.fromkeys(said))  # each sentence once, in the order first said
    recoveries = sum(stage["recoveries"] for stage in run["stages"])
    if run["phase"] == "SUCCEEDED" and recoveries:
        head = f"SUCCEEDED after {recoveries} {'recovery' if recoveries == 1 else 'recoveries'}"
        return Banner("recovered", (head, *said))
    if not said:
        return None
    return Banner("failure" if run["phase"] in _FAILED else "notice", tuple(said))


def _attempt_sentences(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(sentence, detail) per attempt that ended otherwise than well, with what the next
    attempt of its stage restored when one did."""
    found = []
    for stage in run["stages"]:
        attempts = stage["attempts"]
        for index, attempt in enumerate(attempts):
            if attempt["outcome"] in _WELL or not attempt["detail"]:
                continue
            sentence = (
                f"{stage['name']} attempt {attempt['number']} {attempt['outcome']}: "
                f"{attempt['detail']}"
            )
            later = attempts[index + 1] if index + 1 < len(attempts) else None
            restored = restored_text(later) if later is not None else None
            if later is not None:
                sentence += (
                    f"; attempt {later['number']} continued from {restored}"
                    if restored is not None
                    else f"; attempt {later['number']} started over"
                )
            found.append((sentence, attempt["detail"]))
    return found


def banner_html(run: dict[str, Any]) -> Markup:
    said = banner(run)
    if said is None:
        return Markup()
    # "failures" is the red banner's class since the first page: kept for what reads it
    classes = {"failure": "banner failures", "recovered": "banner recovered"}
    return tag(
        "section",
        {"class": classes.get(said.kind, "banner notice"), "data_banner": said.kind},
        tag("ul", None, *[tag("li", None, sentence) for sentence in said.sentences]),
    )
