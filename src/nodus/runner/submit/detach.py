"""The background runner of ``nodus run --detach`` / ``runs resume --detach``.

    python -m nodus.runner.submit.detach RUN_ID --home HOME [--step N] [--resume]
        [--backend NAME] [every backend's drive options: --ray-address ADDR]

Started in its own session by :func:`nodus.runner.submit.claim.spawn_detached`, with its output in
``$NODUS_HOME/work/<run>/runner.log``; it takes the run's lock and drives the run like a
foreground ``nodus run`` would. Its exit status is the run's.

The run was left QUEUED for it. If it is not QUEUED any more once the lock is taken, someone
else dealt with it in between (``runs cancel``, a foreground ``nodus run --key``), so it is left
as it is.
"""

from __future__ import annotations

import argparse
import sys

from nodus.errors import NodusError
from nodus.schemas.backends import drive_options


def parser() -> argparse.ArgumentParser:
    """The detached runner's options: the run, its home, the restore and the placement."""
    parser = argparse.ArgumentParser(prog="python -m nodus.runner.submit.detach")
    parser.add_argument("run_id")
    parser.add_argument("--home", required=True)
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--resume", action="store_true", help="a resume by hand (runs resume)")
    parser.add_argument("--backend", default=None)
    for option in drive_options():  # the registry's: carried to the backends as they are
        parser.add_argument(option.flag, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from nodus.runner.attempt.attempt import Restore
    from nodus.runner.backends.base import Placement, option_values
    from nodus.runner.catalog.core import Catalog
    from nodus.runner.catalog.locks import RunLock
    from nodus.runner.catalog.phases import Phase
    from nodus.runner.submit.claim import drive

    try:
        catalog = Catalog(args.home)
        run = catalog.get_run(args.run_id)
        with RunLock(args.home, run.lock_name, run.id):
            run = catalog.get_run(run.id)
            if run.phase != Phase.QUEUED:
                print(f"nodus: {run.id} is {run.phase} already; not driving it", flush=True)
                return run.exit_status or 0
            wanted = args.step is not None or args.resume
            restore = Restore(step=args.step, by_hand=args.resume) if wanted else None
            placement = Placement.given(args.backend, option_values(args))
            return drive(args.home, catalog, run.id, sys.stdout, restore, placement)
    except NodusError as error:
        print(f"nodus: {error}", file=sys.stderr, flush=True)
        return error.exit_status


if __name__ == "__main__":
    sys.exit(main())
