"""``nodus gc [--dry-run] [--json]``: expiry, interrupted deletions and unreferenced blobs.

Safe from cron while runs capture, and beside another ``nodus gc``; docs/cli.md shows a cron line.
"""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(commands, groups, common: argparse.ArgumentParser) -> None:
    gc = commands.add_parser(
        "gc",
        parents=[common],
        help="expire finished runs' snapshots and free unreferenced space",
        description="Register the model of a succeeded run whose runner was killed before "
        "it did, expire the snapshots of runs that finished more than retention_days ago "
        "(unless held: the run's model, pins, epoch saves, runs started from them), finish "
        "deletions a killed process left half done, and sweep blobs no snapshot references. "
        "Safe to run from cron while runs capture.",
    )
    gc.add_argument("--dry-run", action="store_true", help="report what would go; remove nothing")
    gc.add_argument("--json", action="store_true", help="print the report as JSON")
    gc.set_defaults(handler=_gc)


def _gc(args: argparse.Namespace) -> int:
    from nodus.cli import output
    from nodus.client import Client
    from nodus.schemas.units import human_bytes

    report = Client(args.home, args.store).gc(dry_run=args.dry_run)
    if args.json:
        output.print_json(report)
        return 1 if report["errors"] else 0
    would = "would remove" if report["dry_run"] else "removed"
    for item in report["registered"]:
        print(f"registered: {item['run']}'s model as {item['model']} ({item['snapshot']})")
    for item in report["expired"]:
        print(f"expired: {item['run']} step {item['step']} {item['kind']} ({item['snapshot']})")
    print(
        f"nodus gc {would}: {len(report['expired'])} expired kind(s), "
        f"{report['finished_deletions']} interrupted deletion(s) finished, "
        f"{report['deleted_blobs']} blob(s), {human_bytes(report['freed_bytes'])} freed"
    )
    for url in report["deferred"]:
        print(f"  {url}: captures were running; their blobs are swept by the next gc")
    for error in report["errors"]:
        output.say(error)
    return 1 if report["errors"] else 0
