"""The background runner's arguments and claim, for ``nodus run --detach`` /
``runs resume --detach``.

    RUN_ID --home HOME [--step N] [--resume] [--backend NAME]
        [every backend's drive options: --ray-address ADDR]

:meth:`nodus.runner.submit.claim.Claim.detach` starts the background runner with these
arguments, in its own session, output in ``$NODUS_HOME/work/<run>/runner.log``; the process is
the caller's entry point (the client's, ``python -m nodus.cli.background``: a client driving the
run with its narration, as a foreground ``nodus run`` does), which reads them with
:func:`parser` and takes the run with :func:`claim_queued`. Its exit status is the run's.

The run was left QUEUED for it. If it is not QUEUED any more once the lock is taken, someone
else dealt with it in between (``runs cancel``, a foreground ``nodus run --key``), so it is left
as it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from nodus.runner.attempt.attempt import Restore
from nodus.runner.backends.base import Placement, option_values
from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.locks import RunLock
from nodus.runner.catalog.phases import Phase
from nodus.runner.submit.claim import Claim
from nodus.schemas.backends import drive_options


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The background runner's options: the run, its home, the restore and the placement."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("run_id")
    parser.add_argument("--home", required=True)
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--resume", action="store_true", help="a resume by hand (runs resume)")
    parser.add_argument("--backend", default=None)
    for option in drive_options():  # the registry's: carried to the backends as they are
        parser.add_argument(option.flag, default=None)
    return parser


def claim_queued(args: argparse.Namespace, say: Callable[[str], None]) -> Claim:
    """The run ``args`` name, claimed (its lock taken) to be driven here; a finished claim
    (nothing to drive) when it is no longer QUEUED, said through ``say``."""
    catalog = Catalog(args.home)
    run = catalog.get_run(args.run_id)
    lock = RunLock(args.home, run.lock_name, run.id).acquire()
    try:
        run = catalog.get_run(run.id)
    except BaseException:
        lock.release()
        raise
    if run.phase != Phase.QUEUED:
        lock.release()
        say(f"{run.id} is {run.phase} already; not driving it")
        return Claim(args.home, catalog, run.id, None)
    wanted = args.step is not None or args.resume
    restore = Restore(step=args.step, by_hand=args.resume) if wanted else None
    placement = Placement.given(args.backend, option_values(args))
    return Claim(args.home, catalog, run.id, lock, restore, placement)
