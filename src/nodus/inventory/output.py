"""A run's program output, one attempt at a time, read from an offset: what ``nodus runs logs``
prints, in pieces a page can follow (``nodus ui`` asks for what came after its last piece).

Only whole lines are handed out while the attempt runs (the rest comes with the next piece), and
a piece is at most :data:`MAX_PIECE` bytes, so a long log is followed in steps, never read whole.
"""

from __future__ import annotations

from typing import Any

from nodus.errors import NotFoundError, UsageError

__all__ = ["MAX_PIECE", "output_piece"]

MAX_PIECE = 256 * 1024


def output_piece(
    run: Any, stage: str, attempt: int, offset: int = 0, limit: int = MAX_PIECE
) -> dict[str, Any]:
    """``{stage, attempt, offset, next_offset, lines, running}`` of one attempt's output.

    ``lines`` are the whole lines from byte ``offset`` on (text, undecodable bytes replaced);
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
        "lines": text.splitlines(),
        "running": running,
    }


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
