"""``nodus completion bash|zsh``: shell completion of commands, options, run ids and snapshots.

The script it prints is small and asks nodus itself for the words (``nodus completion
--complete CWORD WORD…``), so it never goes stale as commands change: commands and options come
from the parser, run ids and keys from the catalog, snapshot references (``ID``, ``RUN@STEP``)
from the catalog's ``snapshot_committed`` events. Files are left to the shell. zsh runs the bash
function through ``bashcompinit``, as many tools' completions do.

    eval "$(nodus completion bash)"     # in ~/.bashrc
    eval "$(nodus completion zsh)"      # in ~/.zshrc
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from nodus.errors import UsageError

_MOST = 200  # the newest runs whose ids, keys and snapshots are offered

_BASH = r"""_nodus_complete() {
    local IFS=$'\n'
    local words
    words=($(nodus completion --complete "$COMP_CWORD" "${COMP_WORDS[@]}" 2>/dev/null))
    if [ "${#words[@]}" -eq 0 ]; then
        COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}"))
    else
        COMPREPLY=("${words[@]}")
    fi
}
complete -o filenames -F _nodus_complete nodus
"""
_ZSH = "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"
SCRIPTS = {"bash": _BASH, "zsh": _ZSH + _BASH}


def register(commands: Any, groups: dict[str, Any], common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "completion",
        parents=[common],
        help="print the shell completion script (bash, zsh)",
        description='Print the completion script: eval "$(nodus completion bash)" in ~/.bashrc',
    )
    parser.add_argument("shell", nargs="?", choices=sorted(SCRIPTS), help="bash or zsh")
    parser.add_argument("--complete", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(handler=_completion)


def _completion(args: argparse.Namespace) -> int:
    if args.complete is not None:
        cword, *words = args.complete
        for word in candidates(words, int(cword), args.home):
            print(word)
        return 0
    if args.shell is None:
        raise UsageError("name the shell: nodus completion bash, or nodus completion zsh")
    sys.stdout.write(SCRIPTS[args.shell])
    return 0


def candidates(words: list[str], index: int, home: str | None = None) -> list[str]:
    """The words that may stand at ``words[index]`` (``words[0]`` is ``nodus``), those starting
    with what is typed there; empty when the shell's own file completion fits."""
    from nodus.cli import build_parser

    typed = words[index] if index < len(words) else ""
    parser = build_parser([])
    given: list[str] = []
    for word in words[1:index]:
        choices = _subcommands(parser)
        if word in choices:
            parser, given = choices[word], []
        elif not word.startswith("-"):
            given.append(word)
    previous = words[index - 1] if index > 0 else ""
    if _takes_value(parser, previous):
        return []  # --home DIR, --to DIR, --deadline 10m: the shell's, or free text
    if typed.startswith("-"):
        offered = [o for a in parser._actions for o in a.option_strings if a.help != "==SUPPRESS=="]
    elif _subcommands(parser):
        offered = list(_subcommands(parser))
    else:
        offered = _positional(parser, len(given), home)
    return sorted(word for word in set(offered) if word.startswith(typed))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _takes_value(parser: argparse.ArgumentParser, word: str) -> bool:
    for action in parser._actions:
        if word in action.option_strings:
            return action.nargs != 0
    return False


def _positional(parser: argparse.ArgumentParser, position: int, home: str | None) -> list[str]:
    positionals = [a for a in parser._actions if not a.option_strings and a.dest != "help"]
    if position >= len(positionals):
        return []
    action = positionals[position]
    if action.choices:
        return [str(choice) for choice in action.choices]
    if action.dest == "run":
        return _runs(home)
    if action.dest in ("ref", "snapshot") and action.metavar == "SNAPSHOT":
        return _snapshots(home)
    return []  # a file, a name: the shell's own completion


def _runs(home: str | None) -> list[str]:
    """Run ids and keys, newest runs first."""
    catalog = _catalog(home)
    if catalog is None:
        return []
    try:
        runs = catalog.list_runs(limit=_MOST)
    finally:
        catalog.close()
    return [run.id for run in runs] + [run.key for run in runs if run.key]


def _snapshots(home: str | None) -> list[str]:
    """``RUN@STEP`` and the snapshot id of each committed checkpoint of the newest runs."""
    catalog = _catalog(home)
    if catalog is None:
        return []
    try:
        words = []
        for run in catalog.list_runs(limit=_MOST):
            for event in catalog.events(run.id, types=("snapshot_committed",)):
                details = event["details"]
                words += [f"{run.id}@{details['step']}", details["snapshot"]]
        return words
    finally:
        catalog.close()


def _catalog(home: str | None) -> Any | None:
    """The catalog, or None where there is none yet (completion must never create one)."""
    from nodus.runner.catalog.core import Catalog
    from nodus.schemas.defaults import CATALOG_FILE, nodus_home

    folder = nodus_home(home)
    if not os.path.isfile(os.path.join(folder, CATALOG_FILE)):
        return None
    return Catalog(folder)
