"""The command line's parser: built for the command a line names, with a close match for
every mistyped word.

Only the parser of the command ``argv`` names is built (:func:`build_parser`): building each
of tens of commands' parsers to use one is most of a short command's start-up.

A mistyped command, subcommand, choice or option is answered with the nearest valid word
(``nodus rnu``: ``did you mean 'run'?``; ``nodus run --detatch``: ``did you mean
'--detach'?``), under the usage of the command the mistake is in (``nodus run``'s, never the
top level's), with exit status 2 and no traceback. ``--help`` lists commands in the order
people reach for them (:data:`COMMAND_ORDER`), not in the order their modules register them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "COMMAND_ORDER",
    "Parser",
    "build_parser",
    "invalid_choice",
    "nearest",
    "order_help",
    "parse",
]

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

# Modules that add commands; each has register(commands, groups, common).
_COMMAND_MODULES = (
    "nodus.cli.workload",
    "nodus.cli.runs",
    "nodus.cli.snapshots",
    "nodus.cli.models",
    "nodus.cli.store",
    "nodus.cli.gc_command",
    "nodus.cli.qualify",
    "nodus.cli.ui",
    "nodus.cli.completion",
)

# Command groups whose subcommands several modules contribute to.
_GROUPS = {
    "runs": "inspect and control runs",
    "snapshots": "inspect, download, pin and release snapshots",
    "store": "check and repair the snapshot store",
    "models": "the model registry: versions, aliases, downloads",
}


def _common_options() -> Parser:
    """Options every command takes, wherever they appear on the line."""
    common = Parser(add_help=False)
    common.add_argument(
        "--home",
        default=argparse.SUPPRESS,
        help="nodus home (run catalog, default store); default $NODUS_HOME or ~/.nodus",
    )
    common.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        help="snapshot store URL (file://, s3://, gs://, memory://); default $NODUS_STORE "
        "or file://$NODUS_HOME/store",
    )
    return common


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: only the parser of the command it names is built (argparse
    builds each of tens of commands' parsers otherwise, to use one: most of a short command's
    start-up). Every command's, when the line names none of them or asks for the overview."""
    words = _command_words(sys.argv[1:] if argv is None else argv)
    parser = _build(words) or _build(())
    assert parser is not None  # with no words every command is built: never None
    return parser


def _command_words(argv: Sequence[str]) -> tuple[str, ...]:
    """The command (and a group's subcommand) ``argv`` names, read as argparse will: past
    ``--home``/``--store`` and their values; any other option before it, and we do not guess."""
    words: list[str] = []
    values_follow = False
    for token in argv:
        if values_follow:
            values_follow = False
        elif token in _COMMON_OPTIONS:
            values_follow = True
        elif token.startswith("-"):
            if token.split("=", 1)[0] not in _COMMON_OPTIONS:
                break
        else:
            words.append(token)
            if words[0] not in _GROUPS or len(words) == 2:
                break
    return tuple(words)


def _build(words: tuple[str, ...]) -> argparse.ArgumentParser | None:
    """The parser with the commands ``words`` names (all, without words); None when a word
    names no command (the full parser then says so, listing them)."""
    common = _common_options()
    parser = Parser(
        prog="nodus",
        description="Run training workloads declared in TOML files, with verified snapshots "
        "and automatic recovery.",
        parents=[common],
    )
    parser.add_argument("-V", "--version", action=_Version, help="print nodus's version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    wanted = words[0] if words else None
    groups: dict = {}
    subcommands = None
    for name, help_text in _GROUPS.items():
        if wanted not in (None, name):
            groups[name] = _SKIPPED
            continue
        group = commands.add_parser(name, help=help_text, description=help_text, parents=[common])
        subcommands = group.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
        subcommands.required = True
        groups[name] = _Only(subcommands, words[1] if len(words) == 2 else None)
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:  # a command module not written yet
                continue
            raise
        module.register(_Only(commands, wanted), groups, common)
    if wanted is not None and wanted not in commands.choices:
        return None
    if len(words) == 2 and subcommands is not None and words[1] not in subcommands.choices:
        return None
    order_help(parser)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from importlib.metadata import version

        print(f"nodus {version('nodus')}")
        parser.exit()


class _Only:
    """A subparsers action that adds the parser of one command (``wanted``; every command's
    when None) and skips the others'."""

    def __init__(self, action, wanted: str | None) -> None:
        self._action = action
        self._wanted = wanted

    def add_parser(self, name: str, **kwargs):
        if self._wanted in (None, name):
            return self._action.add_parser(name, **kwargs)
        return _SKIPPED


class _Skipped:
    """What registering a skipped command is given: it takes every call and does nothing."""

    def __getattr__(self, name: str):
        return self._ignore

    def _ignore(self, *args, **kwargs):
        return self


_SKIPPED = _Skipped()
_COMMON_OPTIONS = ("--home", "--store")  # the options _common_options adds, each with a value


_CUTOFF = 0.6  # difflib's default: "rnu" → "run", "--detatch" → "--detach", "lst" → "list"


def nearest(word: str, offered: Iterable[str]) -> str | None:
    """The valid word closest to ``word``, or None when none is close (``difflib`` imported
    here: only a wrong word needs it)."""
    import difflib

    found = difflib.get_close_matches(word, list(offered), n=1, cutoff=_CUTOFF)
    return found[0] if found else None


def invalid_choice(value: object, choices: Iterable[Any]) -> str:
    """``invalid choice: 'rnu'; did you mean 'run'? (choose from 'run', 'runs', …)``: the
    closest word first, when one is close, then every choice, as argparse lists them."""
    words = [str(choice) for choice in choices]
    close = nearest(str(value), words)
    meant = f"; did you mean {close!r}?" if close is not None else ""
    listed = ", ".join(repr(word) for word in words)
    return f"invalid choice: {str(value)!r}{meant} (choose from {listed})"


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
