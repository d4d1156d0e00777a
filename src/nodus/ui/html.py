"""A tiny HTML builder that escapes every value unless it is already :class:`Markup`.

Program output, run names, keys, messages, metric names and event details are all written by
someone else; a page builds its HTML only through :func:`tag` and :func:`join`, so each such
string is escaped where it enters, as markupsafe's ``Markup`` does (without the dependency).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

__all__ = ["Markup", "escape", "join", "tag"]

_VOID = frozenset({"br", "input", "meta", "link", "img", "hr"})


class Markup(str):
    """Text that is HTML already: inserted as it is, never escaped again."""

    __slots__ = ()


def escape(value: Any) -> Markup:
    """``value`` as HTML text: Markup stays, anything else is ``str()``-ed and escaped."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[Any], sep: str = "") -> Markup:
    """Parts one after another, each escaped unless Markup."""
    return Markup(sep.join(escape(part) for part in parts if part is not None))


def tag(name: str, attrs: dict[str, Any] | None = None, *children: Any) -> Markup:
    """``<name attrs>children</name>``; attribute values and children are escaped.

    An attribute whose value is None or False is left out, True writes it bare. A trailing
    ``_`` in a key is dropped (``class_``), and ``_`` inside one becomes ``-`` (``data_run``).
    """
    parts = [name]
    for key, value in (attrs or {}).items():
        if value is None or value is False:
            continue
        attribute = key.rstrip("_").replace("_", "-")
        parts.append(attribute if value is True else f'{attribute}="{escape(value)}"')
    opening = f"<{' '.join(parts)}>"
    if name in _VOID:
        return Markup(opening)
    return Markup(f"{opening}{join(children)}</{name}>")
