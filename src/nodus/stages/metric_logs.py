"""The metrics a directory-contract program logged, read from the files its logger writes.

Three formats, each read from where the last read stopped (a long log is never read again
whole at every poll):

- TensorBoard event files (``*.tfevents.*``: torch's ``SummaryWriter``, Lightning's default
  logger, Accelerate's trackers), read by the ``tensorboard`` package's own loader, which
  turns ``simple_value`` scalars into the scalar plugin's tensors; each scalar is a point of
  its tag. Without ``tensorboard`` installed the files are skipped (:data:`NO_TENSORBOARD`).
- Lightning's ``metrics.csv`` (``CSVLogger``): a ``step`` column, metric columns left blank
  where a row does not log them. Lightning writes the file again whole when a new column
  appears; its header changing makes the reader start over.
- JSON lines (``*.jsonl``): one object a line with a whole number ``step`` and numbers.

A line or record still being written is read at the next poll; the last read of a JSON lines
file (``final``) takes a last line without its newline if it parses, and drops it if it is
torn (a CSV row without its newline is never read: cut off, it may still parse).

Where: :data:`PLACES` in the working copy, or the file or folder ``[continuity] metrics``
names. A point is ``(step, {name: value})``; :func:`at_step` is what a snapshot at a step
carries.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterable
from typing import Any, Protocol

from nodus import protocol

__all__ = [
    "NO_TENSORBOARD",
    "PLACES",
    "MetricLogs",
    "Point",
    "at_step",
    "kind_of",
    "read_jsonl",
]

Point = tuple[int, dict[str, float]]

PLACES = ("runs", "lightning_logs", "metrics.jsonl", f"{protocol.STATE_DIR}/metrics.jsonl")
"""Where a program's logs are looked for without ``[continuity] metrics``, in the working copy:
``SummaryWriter``'s default folder, Lightning's, and a JSON lines file at the top or in the
checkpoint folder."""

NO_TENSORBOARD = (
    "TensorBoard event files are not read: the tensorboard package is not installed "
    "(pip install 'nodus[metrics]')"
)

_STEP = "step"


def kind_of(name: str) -> str | None:
    """Which reader a file name calls for: ``tensorboard``, ``csv``, ``jsonl``, or None."""
    if ".tfevents." in name or name.startswith("events.out.tfevents"):
        return "tensorboard"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith(".jsonl"):
        return "jsonl"
    return None


def at_step(points: Iterable[Point], step: int) -> dict[str, float]:
    """The last value of each name logged at or before ``step``, by step (a later read of
    the same step wins)."""
    latest: dict[str, tuple[int, float]] = {}
    for at, values in points:
        if at > step:
            continue
        for name, value in values.items():
            if name not in latest or latest[name][0] <= at:
                latest[name] = (at, value)
    return {name: value for name, (_at, value) in sorted(latest.items())}


class _Reader(Protocol):
    def read(self, final: bool) -> list[Point]: ...


class MetricLogs:
    """The logs under ``root`` at ``places`` (files or folders, relative), found again at each
    read (a logger may start a new file, e.g. a new ``version_N`` folder) and read on from
    where each stopped."""

    def __init__(self, root: str, places: Iterable[str] = PLACES) -> None:
        self.root = root
        self.places = tuple(places)
        self._readers: dict[str, _Reader] = {}
        self.notes: list[str] = []  # said once each: what could not be read, and why

    def read(self, final: bool = False) -> list[Point]:
        """The points logged since the last read, file by file."""
        points: list[Point] = []
        for path in self._files():
            reader = self._readers.get(path)
            if reader is None:
                made = _reader(path)
                if made is None:
                    if NO_TENSORBOARD not in self.notes:
                        self.notes.append(NO_TENSORBOARD)
                    continue
                reader = self._readers[path] = made
            try:
                points += reader.read(final)
            except OSError:
                continue  # gone or unreadable now: the program may have removed it
        return points

    def _files(self) -> list[str]:
        found: list[str] = []
        for place in self.places:
            path = os.path.join(self.root, place)
            if os.path.isfile(path):
                found.append(path)
                continue
            for folder, dirs, names in os.walk(path):
                dirs.sort()
                found += [os.path.join(folder, n) for n in sorted(names) if kind_of(n)]
        return list(dict.fromkeys(found))


def _reader(path: str) -> _Reader | None:
    kind = kind_of(os.path.basename(path)) or "jsonl"  # a file named in the workload: lines
    if kind == "csv":
        return _CsvLog(path)
    if kind == "jsonl":
        return _JsonlLog(path)
    try:
        from tensorboard.backend.event_processing import event_file_loader  # noqa: F401
    except ImportError:
        return None
    return _TensorBoardLog(path)


class _Lines:
    """A file's whole lines from where the last read stopped."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0

    def read(self, final: bool) -> list[str]:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        whole = data if final else data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return whole.decode("utf-8", errors="replace").splitlines()


class _JsonlLog:
    def __init__(self, path: str) -> None:
        self.lines = _Lines(path)

    def read(self, final: bool) -> list[Point]:
        return read_jsonl(self.lines.read(final))


def read_jsonl(lines: Iterable[str]) -> list[Point]:
    """The points of JSON lines: objects with a whole number ``step``; a line that does not
    parse (torn by a kill) or has no step is passed over."""
    points = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            point = _point(record.get(_STEP), record)
            if point is not None:
                points.append(point)
    return points


class _CsvLog:
    def __init__(self, path: str) -> None:
        self.lines = _Lines(path)
        self.header: list[str] | None = None

    def read(self, final: bool) -> list[Point]:
        if self.header is not None and self._first_line() != self.header:
            self.lines.offset, self.header = 0, None  # written again whole (a new column)
        lines = self.lines.read(False)  # a row cut off never parses safely: whole lines only
        if self.header is None:
            if not lines:
                return []
            self.header = _row(lines.pop(0))
        points = []
        for line in lines:
            row = dict(zip(self.header, _row(line)))
            point = _point(row.get(_STEP), row)
            if point is not None:
                points.append(point)
        return points

    def _first_line(self) -> list[str] | None:
        with open(self.lines.path, "rb") as handle:
            first = handle.readline()
        return _row(first.decode("utf-8", errors="replace")) if first.endswith(b"\n") else None


def _row(line: str) -> list[str]:
    return next(csv.reader(io.StringIO(line)), [])


class _TensorBoardLog:
    """One event file through the ``tensorboard`` package's loader, which reads on from where
    it stopped and leaves a record still being written for the next read."""

    def __init__(self, path: str) -> None:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        self.loader = EventFileLoader(path)

    def read(self, final: bool) -> list[Point]:
        from tensorboard.util.tensor_util import make_ndarray

        points = []
        for event in self.loader.Load():
            if not event.HasField("summary"):
                continue
            values: dict[str, float] = {}
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "scalars":
                    continue  # histograms, images, text: not curves
                array = make_ndarray(value.tensor)
                if array.shape == () and array.dtype.kind in "fiu":
                    values[value.tag] = _number(array)
            point = _point(event.step, values)
            if point is not None:
                points.append(point)
        return points


def _number(array: Any) -> float:
    """A scalar as its writer meant it: a float32 by its shortest digits (0.1, not
    0.10000000149011612)."""
    if array.dtype.itemsize == 4 and array.dtype.kind == "f":
        import numpy

        return float(numpy.format_float_positional(array[()], unique=True, trim="0"))
    return float(array.item())


def _point(step: Any, record: dict[str, Any]) -> Point | None:
    """``(step, numbers)`` of one record; None without a whole number step or any number."""
    try:
        at = int(step) if not isinstance(step, float) or step.is_integer() else None
    except (TypeError, ValueError):
        return None
    if at is None or isinstance(step, bool) or at < 0:
        return None
    values: dict[str, float] = {}
    for name, raw in record.items():
        if name == _STEP or isinstance(raw, bool) or raw in ("", None):
            continue
        try:
            number = float(raw)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            values[str(name)] = number
    return (at, values) if values else None
