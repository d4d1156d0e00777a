"""What every command prints, and where: one set of helpers the command modules share.

Results go to stdout (a table, lines, or ``--json``'s document); what nodus says while it works
goes to stderr as ``nodus: …``, so ``--json`` output stays one document a program can read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TextIO


def say(text: str, stream: TextIO | None = None) -> None:
    """A message for the person at the terminal, on stderr (flushed: progress shows at once);
    ``stream``: elsewhere (the background runner's log)."""
    print(f"nodus: {printable(text, keep=chr(10))}", file=stream or sys.stderr, flush=True)


def printable(value: str, keep: str = "") -> str:
    """``value`` with every control character (an escape sequence's ESC, a bell, a carriage
    return: anything that would drive the terminal) written as its escape, ``\\x1b``; those in
    ``keep`` stay. A run's key or name came from someone's command line or a store's record and
    is shown as text, never obeyed by the terminal."""
    if value.isprintable():
        return value
    return "".join(
        char if char.isprintable() or char in keep else repr(char)[1:-1] for char in value
    )


def print_json(data: Any, sort_keys: bool = False) -> None:
    """``--json``'s document on stdout, indented."""
    print(json.dumps(data, indent=2, sort_keys=sort_keys))


def text(value: object) -> str:
    """A table cell: ``-`` for a value that is not there."""
    return "-" if value is None else printable(str(value))


def table(rows: list[tuple]) -> None:
    """``rows`` (the first one the header) in left-aligned columns two spaces apart."""
    rows = [tuple(printable(str(cell)) for cell in row) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def client(args: Any, say: Callable[[str], None] = say) -> Any:
    """The Client behind a handler, for ``--home`` and ``--store``; a program's own output goes
    to stderr when stdout carries ``--json``'s document."""
    from nodus.client import Client

    output = sys.stderr if getattr(args, "json", False) else sys.stdout
    # each committed snapshot is a line, at a terminal and in a cron job's log alike: a log
    # that never says what was saved cannot answer "what would a restore start from"
    snapshots = not getattr(args, "quiet", False)
    return Client(args.home, args.store, output=output, say=say, say_snapshots=snapshots)


class LiveLine:
    """One line on a terminal's stderr, redrawn every ``every`` seconds with ``line()`` while a
    command blocks; messages (:meth:`say`) go above it. Nothing at all off a terminal."""

    def __init__(self, line: Callable[[], str], every: float = 1.0) -> None:
        import threading

        self._line = line
        self._every = every
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._shown = ""
        self._thread = threading.Thread(target=self._draw, name="nodus-live-line", daemon=True)
        self.enabled = sys.stderr.isatty()

    def __enter__(self) -> LiveLine:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._done.set()
            self._thread.join()
            with self._lock:
                self._clear()

    def say(self, text: str) -> None:
        with self._lock:
            self._clear()
            say(text)
            self._show(self._shown)

    def _draw(self) -> None:
        while not self._done.is_set():
            try:
                text = self._line() or ""
            except Exception:
                text = ""
            with self._lock:
                self._clear()
                self._show(text)
            self._done.wait(self._every)

    def _show(self, text: str) -> None:
        self._shown = text
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()

    def _clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
