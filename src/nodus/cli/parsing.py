"""The command line's parser: argparse's, with a close match for every mistyped word.

A mistyped command, subcommand, choice or option is answered with the nearest valid word
(``nodus rnu``: ``did you mean 'run'?``; ``nodus run --detatch``: ``did you mean
'--detach'?``), under the usage of the command the mistake is in (``nodus run``'s, never the
top level's), with exit status 2 and no traceback. ``--help`` lists commands in the order
people reach for them (:data:`COMMAND_ORDER`), not in the order their modules register them.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["COMMAND_ORDER", "Parser", "invalid_choice", "nearest", "order_help", "parse"]

COMMAND_ORDER: dict[str, tuple[str, ...]] = {
    # "": the top level; a group's name: its subcommands. Words not named keep their order.
    "": (
        "run",
        "runs",
        "validate",
        "resolve",
        "ui",
        "snapshots",
        "models",
        "gc",
        "store",
        "qualify",
        "schema",
        "completion",
    ),
    "runs": (
        "list",
        "get",
        "logs",
        "wait",
        "resume",
        "pause",
        "cancel",
        "branch",
        "snapshots",
        "outputs",
        "plot",
        "delete",
    ),
    "snapshots": ("get", "download", "pin", "release", "candidate", "register"),
    "models": ("list", "get", "download", "alias", "delete"),
}

_CUTOFF = 0.6  # difflib's default: "rnu" → "run", "--detatch" → "--detach", "lst" → "list"


def nearest(word: str, offered: Iterable[str]) -> str | None:
    """The valid word closest to ``word``, or None when none is close."""
    found = difflib.get_close_matches(word, list(offered), n=1, cutoff=_CUTOFF)
    return found[0] if found else None


def invalid_choice(value: object, choices: Iterable[Any]) -> str:
    """``invalid choice: 'rnu'; did you mean 'run'?``, else the choices listed."""
    words = [str(choice) for choice in choices]
    close = nearest(str(value), words)
    if close is not None:
        return f"invalid choice: {str(value)!r}; did you mean {close!r}?"
    return f"invalid choice: {str(value)!r} (choose from {', '.join(words)})"


def unrecognized(extras: Sequence[str], options: Iterable[str]) -> str:
    """What argparse calls ``unrecognized arguments``, each option with its close match."""
    offered = list(options)
    parts = []
    for extra in extras:
        close = nearest(extra.split("=", 1)[0], offered) if extra.startswith("-") else None
        parts.append(f"{extra!r}" + (f" (did you mean {close!r}?)" if close else ""))
    return f"unrecognized argument{'s' if len(parts) > 1 else ''}: {', '.join(parts)}"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose refused choices name the closest valid one; its subparsers are
    of this class too (argparse makes them of their parent's class)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            raise argparse.ArgumentError(action, invalid_choice(value, action.choices))


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that words no parser took are refused by the
    innermost command's parser (its usage, its options' close matches), not the top level's."""
    parsed, extras = parser.parse_known_args(argv)
    if extras:
        innermost = _innermost(parser, parsed)
        innermost.error(unrecognized(extras, _option_strings(innermost)))
    return parsed


def _innermost(parser: argparse.ArgumentParser, parsed: argparse.Namespace):
    """The parser of the deepest command ``parsed`` names (``nodus runs list``'s)."""
    while True:
        action = _subparsers(parser)
        chosen = getattr(parsed, action.dest, None) if action else None
        if action is None or chosen not in action.choices:
            return parser
        parser = action.choices[chosen]


def _subparsers(parser: argparse.ArgumentParser) -> Any:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [
        option
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
    ]


def order_help(parser: argparse.ArgumentParser) -> None:
    """Commands (and each group's subcommands) in :data:`COMMAND_ORDER`, in ``--help``, in
    the choices a refusal lists and in what completion offers."""
    _order(_subparsers(parser), COMMAND_ORDER[""])
    for group in COMMAND_ORDER:
        action = _subparsers(parser)
        if group and action is not None and group in action.choices:
            _order(_subparsers(action.choices[group]), COMMAND_ORDER[group])


def _order(action: Any, order: tuple[str, ...]) -> None:
    if action is None:
        return
    rank = {name: index for index, name in enumerate(order)}

    def key(name: str) -> int:
        return rank.get(name, len(order))

    action._choices_actions.sort(key=lambda choice: key(choice.dest))
    ordered = sorted(action.choices.items(), key=lambda item: key(item[0]))
    action.choices.clear()
    action.choices.update(ordered)
