"""A program's output as a terminal would show it: what the runner streams (``[stage]`` lines),
``nodus runs logs`` (``-f`` too) and ``nodus ui`` print of an attempt's log, whose bytes stay as
the program wrote them (``runs logs --raw``, the page's raw link).

A progress bar (tqdm's) redraws itself with a carriage return: off a terminal its frames pile
up as one huge line, or as hundreds of lines with blank ones between, with cursor escapes
(``ESC[A``) in them. :func:`collapse` keeps, of each line, the frame a terminal would leave on
the screen (the last one that shows anything), drops the escape sequences, and drops a line
that shows nothing *because of* them (a bar cleared before the next one is drawn); a program's
own empty line (``\\n\\n``) stays.

It is fed in pieces as a log is followed: what it cannot finish yet (the line after the last
newline) comes back as ``pending``, cut to its last frame so a bar redrawn for hours without a
newline is never held whole, and goes in front of the next piece.
"""

from __future__ import annotations

import re

__all__ = ["collapse"]

# ESC [ parameters intermediates final (CSI: cursor moves, colours, erase), ESC ] … BEL or
# ESC \ (OSC: titles, links), and the two-byte escapes (ESC 7, ESC M, …).
_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[ -/]*[0-~]"
)


def collapse(pending: str, piece: str, *, final: bool) -> tuple[list[str], str]:
    """The lines a terminal would show of ``pending + piece``, and the new ``pending``.

    ``final`` says no more is coming (the attempt ended, or a piece that ends at a line's
    end): the unfinished last line is shown too and ``pending`` comes back empty.
    """
    text = pending + piece
    *whole, rest = text.split("\n")
    lines = [shown for line in whole if (shown := _shown(line)) is not None]
    if final:
        last = _shown(rest) if rest else None
        return ([*lines, last] if last is not None else lines), ""
    return lines, _last_frame(rest)


def _shown(line: str) -> str | None:
    """What a terminal leaves of one line; ``None`` for a line only frames and escapes made
    blank (a program's own empty line is ``""``)."""
    plain = _ESCAPE.sub("", line).replace("\x1b", "")
    if plain == line and "\r" not in line:
        return line
    frames = [frame for frame in plain.split("\r") if frame.strip()]
    return frames[-1].rstrip() if frames else None


def _last_frame(rest: str) -> str:
    """The unfinished line from its last frame that shows something on (what came before it
    is drawn over); an escape sequence cut by the piece's end stays whole in what is kept."""
    frames = rest.split("\r")
    showing = [i for i, frame in enumerate(frames) if _ESCAPE.sub("", frame).strip()]
    keep = showing[-1] if showing else len(frames) - 1
    return ("\r" if keep else "") + "\r".join(frames[keep:])
