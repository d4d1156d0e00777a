"""The background runner of ``nodus run --detach`` / ``runs resume --detach`` (and the SDK's
``detach=True``):

    python -m nodus.cli.background RUN_ID --home HOME [--quiet] [--step N] [--resume]
        [--backend NAME] [every backend's drive options: --ray-address ADDR]

Started in its own session by the client that handed the run over
(:meth:`nodus.runner.submit.claim.Claim.detach`), with its stdout and stderr in
``$NODUS_HOME/work/<run>/runner.log``. It is a client driving the claimed run as a foreground
``nodus run`` does (:meth:`nodus.Client.drive_handed_over`), so the log holds the same lines as
that command's stderr: the run's program output, a line per interruption, recovery and (unless
``--quiet``) committed snapshot, and the final phase line. Its exit status is the run's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from nodus.cli import output
from nodus.errors import NodusError, redacted

PROG = "python -m nodus.cli.background"


def _log(text: str) -> None:
    """A line of the log, as the foreground command says it on stderr (``nodus: …``), on stdout
    where the program's output goes too: one stream, in the order things happened."""
    output.say(text, sys.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    from nodus.client import Client
    from nodus.runner.submit.detach import parser

    options = parser(PROG)
    options.add_argument(
        "--quiet", action="store_true", help="no line per committed snapshot (as nodus run's)"
    )
    args = options.parse_args(argv)
    try:
        with Client(args.home, output=sys.stdout, say=_log, say_snapshots=not args.quiet) as client:
            run = client.drive_handed_over(args)
    except NodusError as error:
        output.say(redacted(str(error)))  # a store URL's password is never repeated back
        return error.exit_status
    return int(run["exit_status"] or 0)


if __name__ == "__main__":
    sys.exit(main())
