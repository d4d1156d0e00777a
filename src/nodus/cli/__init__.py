"""The ``nodus`` command line.

Each command module registers its parsers with ``register(commands, groups, common)`` and does
its work in a handler ``(args) -> int``, printing through :mod:`nodus.cli.output` (messages,
``--json`` documents, tables, the Client). Command modules import nothing heavy at module level:
``nodus validate`` and ``nodus runs list`` must answer in well under half a second, so an ML
framework is imported only inside the handler that needs it.

Every :class:`~nodus.errors.NodusError` is printed as its message and ends the process with its
exit status; anything else is a bug, reported in one line (``NODUS_DEBUG=1`` shows the traceback).

    workload.py   ``nodus validate``, ``nodus resolve``, ``nodus schema``
    runs.py       ``nodus run`` and ``nodus runs list|get|wait|cancel|pause|logs|resume|branch``
    snapshots.py  ``nodus snapshots get|download|pin|release``,
                  ``nodus runs snapshots|outputs|plot``
    models.py     ``nodus models …`` and ``nodus snapshots candidate|register``
    gc_command.py ``nodus gc`` (a thin command: the collection is ``nodus.runner.upkeep.gc``)
    store.py      ``nodus store verify``: every manifest and blob checked
    qualify.py    ``nodus qualify``: the hf-trainer-v1 qualification suite on this environment
    ui.py         ``nodus ui``: a read-only page of the runs in a browser (:mod:`nodus.ui`)
    completion.py ``nodus completion bash|zsh|fish``: commands, options, run ids and snapshots
    background.py ``python -m nodus.cli.background``: the background runner of ``--detach``, a
                  client driving the run, narrated into its ``runner.log``
    output.py     what every command prints, and where: messages, ``--json``, tables, the Client
    parsing.py    the parser of the line's command: close matches for mistyped words, commands
                  in the order of use
"""

from __future__ import annotations

import atexit
import errno
import os
import sys
import threading
from collections.abc import Sequence

from nodus.cli.parsing import build_parser, parse
from nodus.errors import NodusError, note_url, redacted

__all__ = ["build_parser", "main", "run"]

_COMPLETING = ("completion", "--complete")  # what the completion scripts call: CWORD WORD…


def _check_home(explicit: str | None) -> None:
    """``--home`` (or ``$NODUS_HOME``) names a folder, or a path where one can be made."""
    from nodus.errors import UsageError
    from nodus.schemas.defaults import nodus_home

    home = nodus_home(explicit)
    if os.path.exists(home) and not os.path.isdir(home):
        given = "--home" if explicit else "NODUS_HOME"
        raise UsageError(f"{given} {home}: not a folder; give a folder for nodus's home")


def main(argv: Sequence[str] | None = None) -> int:
    line = sys.argv[1:] if argv is None else list(argv)
    if line[:2] == list(_COMPLETING):
        # A shell's words, taken as they are: argparse would read a bare "--" among them
        from nodus.cli.completion import complete

        return complete(line[2:])
    parser = build_parser(argv)
    args = parse(parser, argv)
    args.home = getattr(args, "home", None)
    args.store = getattr(args, "store", None)
    note_url(args.store or os.environ.get("NODUS_STORE", ""))  # never repeated back
    try:
        _check_home(args.home)
        return int(args.handler(args) or 0)
    except NodusError as error:
        text = redacted(str(error))  # a store URL's password is never repeated back
        print(f"nodus: {text}" if "\n" not in text else text, file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("nodus: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as error:
        if error.errno not in _ENVIRONMENT:
            return _internal(error)
        print(f"nodus: {redacted(_environment_words(error))}", file=sys.stderr)
        return 1
    except Exception as error:  # a bug in nodus, never a user's mistake
        return _internal(error)


# The machine refused, not nodus: a full disk or quota, a read-only file system, permissions.
_ENVIRONMENT = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


def _environment_words(error: OSError) -> str:
    """What the machine refused, where, and what to do about it."""
    where = f" ({error.filename})" if error.filename else ""
    advice = {
        errno.ENOSPC: "the disk is full: free space on it and retry",
        errno.EDQUOT: "the disk quota is used up: free space and retry",
        errno.EROFS: "the file system is mounted read-only: use a writable place (--home, --store)",
    }.get(error.errno or 0, "nodus may not write there: check the owner and permissions")
    return f"{error.strerror}{where}; {advice}"


def _internal(error: BaseException) -> int:
    """A bug in nodus, never a user's mistake: one line, the traceback on demand."""
    if os.environ.get("NODUS_DEBUG"):
        raise error
    print(
        f"nodus: internal error: {type(error).__name__}: {redacted(str(error))} "
        "(set NODUS_DEBUG=1 for the traceback and please report it)",
        file=sys.stderr,
    )
    return 1


def run() -> None:
    """The ``nodus`` command, installed and as ``python -m nodus``: :func:`main`, then exit."""
    status = main()
    # CPython's own runner of the exit handlers; the normal exit where an interpreter lacks it.
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if threading.active_count() == 1 and run_exit_handlers is not None:
        # Nothing left running: leave without the interpreter's teardown, which frees every
        # object of every module one by one (tens of milliseconds after a `nodus run`). Exit
        # handlers still run (logging's flush, weakref finalizers such as a temporary folder's
        # removal), and the output is flushed first.
        run_exit_handlers()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):
            pass  # a reader that went away: nothing more to tell it
        os._exit(status)
    sys.exit(status)  # a thread still runs: the interpreter waits for it as it always does
