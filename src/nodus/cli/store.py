"""``nodus store verify [--repair] [--json]``: check every manifest and blob of the store."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(commands, groups, common: argparse.ArgumentParser) -> None:
    verify = groups["store"].add_parser(
        "verify",
        parents=[common],
        help="check every snapshot and blob; exit 1 if any is damaged",
        description="Read every committed manifest and every blob of the store and check each "
        "file's xxh3-128. --repair sets damaged snapshots aside (they are no longer listed), "
        "removes blobs whose contents do not match their name, and clears leftovers of killed "
        "captures.",
    )
    verify.add_argument("--repair", action="store_true", help="set damaged snapshots aside")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    from nodus.cli import output
    from nodus.schemas import defaults
    from nodus.store import open_store

    store = open_store(defaults.store_url(args.store, args.home))
    report = store.verify(repair=args.repair)
    if args.json:
        output.print_json(report.to_dict(), sort_keys=True)
    else:
        print("\n".join(report.lines()))
    return 0 if report.sound else 1
