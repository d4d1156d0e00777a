"""Typed reads of the JSON objects a store holds: every field its type, or ``Damage``.

A store is input: anyone who can write it can put anything in a manifest or a record. Each
reader takes its fields through these functions, so a value of the wrong type (a step
``"ten"``, a mode ``10**30``, a list where an object belongs) is reported as damage naming
the field, where it is read, and never travels on to fail as an internal error later.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["HASH", "Damage", "integer", "mapping", "number", "sequence", "text"]

HASH = re.compile(r"[0-9a-f]{32}")
"""A blob's name: the 32 hex digits of an xxh3-128 (``fullmatch`` it)."""

_MISSING = object()
_INT64 = 2**63  # what a file system's times and sizes fit in


class Damage(ValueError):
    """A stored object that is not what nodus writes; the message names the field."""


def mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Damage(f"{where} is {_shown(value)}, not an object")
    return value


def sequence(data: dict[str, Any], name: str, where: str = "") -> list[Any]:
    value = _get(data, name, where)
    if not isinstance(value, list):
        raise Damage(f"{_at(where, name)} is {_shown(value)}, not a list")
    return value


def text(data: dict[str, Any], name: str, where: str = "", *, optional: bool = False) -> Any:
    value = _get(data, name, where, optional)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Damage(f"{_at(where, name)} is {_shown(value)}, not text")
    return value


def integer(
    data: dict[str, Any],
    name: str,
    where: str = "",
    *,
    optional: bool = False,
    minimum: int = -_INT64,
    maximum: int = _INT64 - 1,
) -> Any:
    value = _get(data, name, where, optional)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Damage(f"{_at(where, name)} is {_shown(value)}, not an integer")
    if not minimum <= value <= maximum:
        raise Damage(f"{_at(where, name)} is {_shown(value)}, not in [{minimum}, {maximum}]")
    return value


def number(
    data: dict[str, Any], name: str, where: str = "", *, optional: bool = False, finite: bool = True
) -> Any:
    """A number; ``finite=False`` also takes the NaN and infinities a float may hold (a
    program's epoch is written as it reported it, and must read back as it was written)."""
    value = _get(data, name, where, optional)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Damage(f"{_at(where, name)} is {_shown(value)}, not a number")
    if (isinstance(value, int) and abs(value) >= _INT64) or (finite and not _finite(value)):
        raise Damage(f"{_at(where, name)} is {_shown(value)}, not a finite number")
    return value


def _get(data: dict[str, Any], name: str, where: str, optional: bool = False) -> Any:
    value = data.get(name, _MISSING)
    if value is _MISSING:
        if optional:
            return None
        raise Damage(f"{_at(where, name)} is missing")
    return value


def _finite(value: int | float) -> bool:
    if isinstance(value, int):
        return abs(value) < _INT64
    return math.isfinite(value)


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
