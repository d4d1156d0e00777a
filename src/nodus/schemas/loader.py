"""Reading workload files: TOML text → :class:`Workload` → :class:`ResolvedWorkload`.

Every way a file can be wrong (missing, unreadable, not UTF-8, bad TOML, broken rules) ends in
:class:`~nodus.errors.WorkloadError` naming the file, so the command line never shows a traceback.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from nodus.errors import Problem, WorkloadError
from nodus.schemas.files import regular_file
from nodus.schemas.models import Overrides, Workload
from nodus.schemas.resolve import resolve
from nodus.schemas.resolved import ResolvedWorkload

# tomllib writes the position into the message: "Invalid value (at line 3, column 9)".
_POSITION = re.compile(r"^(?P<what>.*?) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")
_AT_END = " (at end of document)"


def read_document(path: str | os.PathLike[str], data: bytes | None = None) -> dict[str, Any]:
    """The TOML document in ``path``; syntax errors name the line and column. ``data``: the
    file's bytes when the caller has read them already (what is checked is what it read)."""
    source = os.fspath(path)
    try:
        if data is None:
            if not regular_file(source) and not os.path.isdir(source):  # a FIFO would block
                raise _refused(source, "not a regular file; give the workload file")
            with open(source, "rb") as handle:
                data = handle.read()
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise _refused(source, "no such file") from None
    except IsADirectoryError:
        raise _refused(source, "is a folder; give the workload file") from None
    except UnicodeDecodeError as error:
        raise _refused(source, f"not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise _refused(source, f"cannot be read: {error.strerror or error}") from None
    return parse_document(text, source)


def parse_document(text: str, source: str | None = None) -> dict[str, Any]:
    """The TOML document in ``text``; syntax errors name the line and column."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _refused(source, _syntax_message(str(error), text)) from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise _refused(source, "TOML syntax error: nested too deeply") from None


def _syntax_message(message: str, text: str) -> str:
    match = _POSITION.match(message)
    if match:
        what, line, column = match["what"], match["line"], match["column"]
    elif message.endswith(_AT_END):  # the document stopped mid-value: point at its end
        what = message[: -len(_AT_END)]
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
    else:
        return f"TOML syntax error: {message}"
    what = what[0].lower() + what[1:]
    return f"TOML syntax error at line {line}, column {column}: {what}"


def _refused(source: str | None, message: str) -> WorkloadError:
    return WorkloadError([Problem("", message)], source)


def workload_from_document(document: Mapping[str, Any], source: str | None = None) -> Workload:
    """Check a parsed document; ``source`` is the file it came from (for messages and ``code``)."""
    try:
        workload = Workload.model_validate(dict(document))
    except WorkloadError as error:
        raise WorkloadError(error.problems, source) from None
    if source is not None:
        workload._source = source
    return workload


def load_workload(path: str | os.PathLike[str], data: bytes | None = None) -> Workload:
    """The workload in the TOML file at ``path`` (or its bytes ``data``, read already),
    checked but not resolved (omission kept)."""
    source = os.fspath(path)
    return workload_from_document(read_document(source, data), source)


def resolve_file(
    path: str | os.PathLike[str],
    overrides: Overrides | Mapping[str, Any] | None = None,
    data: bytes | None = None,
) -> ResolvedWorkload:
    """Read, check and resolve the workload file at ``path`` (what a run stores at submit);
    ``data``: its bytes, when the caller has read them already."""
    workload = load_workload(path, data)
    return resolve(workload, base_dir=os.path.dirname(os.path.abspath(path)), overrides=overrides)
