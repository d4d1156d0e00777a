"""``nodus completion bash|zsh|fish``: completion of commands, options, run ids and snapshots.

The script it prints is small and asks nodus itself for the words (``nodus completion
--complete CWORD WORD…``), so it never goes stale as commands change: commands and options come
from the parser, run ids and keys from the catalog, snapshot references (``ID``, ``RUN@STEP``)
from the catalog's ``snapshot_committed`` events. Files are left to the shell. zsh runs the bash
function through ``bashcompinit``, as many tools' completions do; fish has its own function
over the same ``--complete``. After a bare ``--`` every word is an argument: no option is
offered there.

    eval "$(nodus completion bash)"     # in ~/.bashrc
    eval "$(nodus completion zsh)"      # in ~/.zshrc
    nodus completion fish | source      # in ~/.config/fish/config.fish
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
# fish: the words before the cursor and the one under it; files where nodus offers nothing.
_FISH = r"""function __nodus_complete
    set -l words (commandline -opc) (commandline -ct)
    set -l found (nodus completion --complete (math (count $words) - 1) $words 2>/dev/null)
    if test (count $found) -eq 0
        __fish_complete_path (commandline -ct)
    else
        printf '%s\n' $found
    end
end
complete -c nodus -f -a '(__nodus_complete)'
"""
SCRIPTS = {"bash": _BASH, "zsh": _ZSH + _BASH, "fish": _FISH}


def register(commands: Any, groups: dict[str, Any], common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "completion",
        parents=[common],
        help="print the shell completion script (bash, zsh, fish)",
        description='Print the completion script: eval "$(nodus completion bash)" in ~/.bashrc, '
        '"$(nodus completion zsh)" in ~/.zshrc, nodus completion fish | source in fish',
    )
    parser.add_argument("shell", nargs="?", choices=sorted(SCRIPTS), help="bash, zsh or fish")
    parser.add_argument("--complete", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(handler=_completion)


def complete(line: list[str]) -> int:
    """``nodus completion --complete CWORD WORD…``: the candidates, one a line. Called with
    the line as the shell gives it, before any parsing (``nodus.cli.main``); the catalog is
    ``--home``'s among the words, else ``$NODUS_HOME``'s. Nothing at all for a line that is
    not one: a completion never prints an error into a shell's prompt."""
    if not line or not line[0].isdigit():
        return 0
    words = line[1:]
    try:
        for word in candidates(words, int(line[0]), _home_among(words)):
            print(word)
    except Exception:  # a damaged catalog, a bug: the shell falls back to its own completion
        return 1
    return 0


def _home_among(words: list[str]) -> str | None:
    """``--home DIR`` (or ``--home=DIR``) among the words already typed."""
    for index, word in enumerate(words):
        if word == "--home" and index + 1 < len(words):
            return words[index + 1]
        if word.startswith("--home="):
            return word.split("=", 1)[1]
    return None


def _completion(args: argparse.Namespace) -> int:
    if args.complete is not None:  # --complete after another option: parsed, as argparse can
        return complete(args.complete)
    if args.shell is None:
        raise UsageError("name the shell: nodus completion bash, zsh or fish")
    sys.stdout.write(SCRIPTS[args.shell])
    return 0


def candidates(words: list[str], index: int, home: str | None = None) -> list[str]:
    """The words that may stand at ``words[index]`` (``words[0]`` is ``nodus``), those starting
    with what is typed there; empty when the shell's own file completion fits."""
    from nodus.cli.parsing import build_parser

    typed = words[index] if index < len(words) else ""
    parser, given, options_end = _walk(build_parser([]), words[1:index])
    previous = words[index - 1] if index > 0 else ""
    if not options_end and _takes_value(parser, previous):
        return []  # --home DIR, --to DIR, --deadline 10m: the shell's, or free text
    if typed.startswith("-") and not options_end:
        offered = [o for a in parser._actions for o in a.option_strings if a.help != "==SUPPRESS=="]
    elif _subcommands(parser):
        offered = list(_subcommands(parser))
    else:
        offered = _positional(parser, len(given), home)
    return sorted(word for word in set(offered) if word.startswith(typed))


def _walk(
    parser: argparse.ArgumentParser, words: list[str]
) -> tuple[argparse.ArgumentParser, list[str], bool]:
    """The parser of the command ``words`` name, the arguments given to it, and whether a
    bare ``--`` ended its options (every word after it is an argument)."""
    given: list[str] = []
    options_end = False
    for word in words:
        choices = _subcommands(parser)
        if word == "--" and not options_end:
            options_end = True
        elif word in choices and not options_end:
            parser, given = choices[word], []
        elif options_end or not word.startswith("-"):
            given.append(word)
    return parser, given, options_end


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
