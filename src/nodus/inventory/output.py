"""A run's program output, one attempt at a time, read from an offset: what ``nodus runs logs``
prints, in pieces a page can follow (``nodus ui`` asks for what came after its last piece).

Only whole lines are handed out while the attempt runs (the rest comes with the next piece), and
a piece is at most :data:`MAX_PIECE` bytes, so a long log is followed in steps, never read whole.
The lines are what a terminal would show (:func:`nodus.stages.terminal.collapse`: a progress
bar's last frame, no escape sequences); :func:`log_file` is the file of the bytes as written.
"""

from __future__ import annotations

from typing import Any

from nodus.errors import NotFoundError, UsageError
from nodus.stages.terminal import collapse

__all__ = ["MAX_PIECE", "log_file", "output_piece"]

MAX_PIECE = 256 * 1024


def output_piece(
    run: Any, stage: str, attempt: int, offset: int = 0, limit: int = MAX_PIECE
) -> dict[str, Any]:
    """``{stage, attempt, offset, next_offset, lines, running}`` of one attempt's output.

    ``lines`` are the whole lines from byte ``offset`` on as a terminal shows them (text,
    undecodable bytes replaced, a progress bar's frames collapsed to its last one);
    ``next_offset`` is where the next piece starts; ``running`` whether more may come.
    """
    if not 0 <= offset <= _LARGEST:
        raise UsageError(f"offset {offset}: give a whole number from 0 to {_LARGEST}")
    found = _attempt(run, stage, attempt)
    running = found["outcome"] is None
    data = _read(found["log_path"], offset, min(max(limit, 1), MAX_PIECE))
    whole = data if not running and len(data) < limit else data[: data.rfind(b"\n") + 1]
    if not whole and len(data) >= limit:
        whole = data  # one line longer than a piece: handed out in pieces
    text = whole.decode("utf-8", errors="replace")
    return {
        "stage": stage,
        "attempt": attempt,
        "offset": offset,
        "next_offset": offset + len(whole),
        "lines": collapse("", text, final=True)[0],
        "running": running,
    }


def log_file(run: Any, stage: str, attempt: int) -> str | None:
    """The file of one attempt's output, its bytes as the program wrote them (``None`` before
    the attempt has one)."""
    path = _attempt(run, stage, attempt)["log_path"]
    return str(path) if path else None


def _attempt(run: Any, stage: str, number: int) -> dict[str, Any]:
    for one in run.stages:
        if one["name"] == stage:
            for attempt in one["attempts"]:
                if attempt["number"] == number:
                    return attempt
            raise NotFoundError(f"{run.id} stage {stage} has no attempt {number}")
    raise NotFoundError(f"{run.id} has no stage {stage!r}")


_LARGEST = 2**63 - 1  # the largest offset a file can be read from


def _read(path: str | None, offset: int, limit: int) -> bytes:
    if not path:
        return b""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""
