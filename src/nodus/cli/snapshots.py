"""``nodus snapshots get|download|pin|release`` and ``nodus runs snapshots|outputs|plot``.

The work is done in :mod:`nodus.inventory` (``runs snapshots`` and ``snapshots download``
through :class:`nodus.Client`); handlers only parse, call and print. Nothing heavy is imported
at module level (matplotlib only inside ``runs plot``). ``--json`` shapes are documented in
docs/cli.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from nodus.cli import output
from nodus.schemas.units import human_bytes

__all__ = ["register"]

_REF_HELP = "snapshot id (ckpt_…), RUN@STEP or RUN/STAGE@STEP (RUN: run id or key)"


def register(commands, groups, common: argparse.ArgumentParser) -> None:
    _register_snapshots(groups["snapshots"], common)
    _register_runs(groups["runs"], common)


def _register_snapshots(group, common) -> None:
    get = _add(group, "get", "one snapshot: bytes per kind, files, hashes, holds", common, _get)
    get.add_argument("ref", metavar="SNAPSHOT", help=_REF_HELP)
    get.add_argument(
        "--no-verify",
        action="store_true",
        help="do not read the files to check their hashes (quicker for big ones)",
    )
    get.add_argument("--json", action="store_true", help="machine-readable output")

    download = _add(
        group,
        "download",
        "download a snapshot's model, resumable state or adapter into a folder (verified)",
        common,
        _download,
    )
    download.add_argument("ref", metavar="SNAPSHOT", help=_REF_HELP)
    download.add_argument("--to", required=True, metavar="DIR", help="a new or empty folder")
    download.add_argument(
        "--artifact",
        default="model",
        choices=("model", "resumable", "adapter"),
        help="model (default): weights, config, tokenizer; resumable: the "
        "whole checkpoint; adapter: the LoRA adapter files",
    )
    download.add_argument("--json", action="store_true", help="print what was written as JSON")

    for name, text in (
        ("pin", "keep a snapshot's kinds from retention"),
        ("release", "drop a snapshot's pin and epoch hold"),
    ):
        parser = _add(group, name, text, common, _pin if name == "pin" else _release)
        parser.add_argument("ref", metavar="SNAPSHOT", help=_REF_HELP)
        parser.add_argument("--json", action="store_true", help="print the holds as JSON")


def _register_runs(group, common) -> None:
    listing = _add(group, "snapshots", "a run's committed snapshots", common, _list)
    listing.add_argument("run", help="run id (run_…) or key")
    listing.add_argument("--stage", help="only this stage")
    listing.add_argument(
        "--sort",
        metavar="METRIC",
        help="sort by a logged metric (loss, reward, …) or step, epoch, attempt; smallest first",
    )
    listing.add_argument("--reverse", action="store_true", help="largest (or newest) first")
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    outputs = _add(group, "outputs", "download a run's final outputs (verified)", common, _outputs)
    outputs.add_argument("run", help="run id (run_…) or key")
    outputs.add_argument("--to", required=True, metavar="DIR", help="a new or empty folder")
    outputs.add_argument("--stage", help="only this stage's outputs")
    outputs.add_argument("--json", action="store_true", help="print what was written as JSON")

    plot = _add(
        group, "plot", "draw a run's metrics, snapshots and recoveries (PNG)", common, _plot
    )
    plot.add_argument("run", help="run id (run_…) or key")
    plot.add_argument("--out", required=True, metavar="FILE", help="image to write (.png, .svg)")


def _add(group, name: str, help_text: str, common, handler):
    parser = group.add_parser(name, parents=[common], help=help_text, description=help_text)
    parser.set_defaults(handler=handler)
    return parser


def _lookup(args):
    from nodus.inventory import Lookup

    return Lookup(args.home, args.store)


# --- runs snapshots / snapshots get -------------------------------------------------------------


def _list(args) -> int:
    from nodus.inventory.runs import step_text

    client = output.client(args)
    rows = client.snapshots(args.run, sort=args.sort, stage=args.stage, reverse=args.reverse)
    if args.json:
        output.print_json(rows)
        return 0
    run = client.get(args.run)
    if not rows:
        output.say(f"{run['id']} ({run['phase']}) has no committed snapshots")
        return 0
    multi = len(run["stages"]) > 1
    table = [
        ("ID",)
        + (("STAGE",) if multi else ())
        + ("STEP", "EPOCH", "ATTEMPT", "KINDS", "METRICS", "PINNED", "MODEL")
    ]
    for row in rows:
        table.append(
            (row["id"],)
            + ((row["stage"],) if multi else ())
            + (
                _step_cell(row) + (" !" if row["suspect"] else ""),
                _epoch(row["epoch"]),
                str(row["attempt"]),
                _kinds(row),
                _metrics(row["metrics"]),
                "yes" if row["pinned"] else "-",
                "yes" if row["model"] else "-",
            )
        )
    output.table(table)
    for row in rows:
        if row["suspect"]:
            said = row["suspect"]["error"] or row["suspect"]["exit"]
            print(f"! {step_text(row)} ({row['id']}) is suspect, restores pass over it: {said}")
    return 0


def _step_cell(row: dict[str, Any]) -> str:
    """The STEP column: the program's step, or ``capture N`` where none was recorded."""
    from nodus.inventory.runs import step_text

    return step_text(row) if row["capture"] is not None else output.text(row["step"])


def _get(args) -> int:
    from nodus.inventory.listing import describe

    lookup = _lookup(args)
    data = describe(lookup, lookup.locate(args.ref), verify=not args.no_verify)
    if args.json:
        output.print_json(data)
        return 0
    for line in _detail_lines(data):
        print(line)
    return 0 if data["verified"] is not False else 1


def _detail_lines(data: dict[str, Any]) -> list[str]:
    from nodus.inventory.runs import step_text

    verdict = {True: "verified", False: "DAMAGED", None: "not verified"}[data["verified"]]
    lines = [
        f"{data['id']}  {data['role']}  run {data['run']}  stage {data['stage'] or '-'}  "
        f"attempt {data['attempt']}  {step_text(data)}  "
        f"epoch {_epoch(data['epoch'])}",
        f"  kinds:   {_kinds(data) or 'none'}",
        f"  metrics: {_metrics(data['metrics']) or '-'}",
        f"  hashes:  {verdict}",
    ]
    if data.get("suspect"):  # a restored attempt failed before it saved
        said = data["suspect"]["error"] or data["suspect"]["exit"]
        lines.append(f"  suspect: restores pass over it ({said})")
    lines += [f"    {problem}" for problem in data["problems"]]
    holds = data["holds"]
    lines.append(
        "  holds:   "
        + (
            "-"
            if not holds
            else "; ".join(f"{h['type']} ({', '.join(h['kinds'])}): {h['detail']}" for h in holds)
        )
    )
    if data["model"]:
        lines.append("  the run's model (its save at the run's last update)")
    for kind, deletion in sorted(data["deleted"].items()):
        lines.append(f"  deleted: {kind} by {deletion['reason'] or 'retention'}")
    lines.append("  files:")
    width = max((len(f["path"]) for f in data["files"]), default=0)
    for entry in data["files"]:
        mark = {True: "ok", False: "BAD", None: "-"}[entry["verified"]]
        held = "" if entry["held"] else "  (deleted by retention)"
        lines.append(
            f"    {entry['path']:<{width}}  {entry['kind']:<7}  "
            f"{human_bytes(entry['size']):>9}  {entry['hash'][:16] or 'symlink':<16}  "
            f"{mark}{held}"
        )
    return lines


# --- download / outputs -------------------------------------------------------------------------


def _download(args) -> int:
    return _report_written(args, output.client(args).download(args.ref, args.to, args.artifact))


def _outputs(args) -> int:
    from nodus.errors import NotFoundError
    from nodus.inventory.download import download_outputs, written_json

    lookup = _lookup(args)
    run = lookup.run(args.run)
    store = lookup.store_of_run(run)
    manifests = []
    for stage in run.stages:
        if args.stage in (None, stage["name"]):
            found = store.list(run=run.id, stage=stage["name"], role="outputs")
            manifests += found[-1:]  # the stage's newest: its final outputs
    if not manifests:
        declared = sorted({p for s in run.workload["stages"] for p in s.get("outputs", ())})
        why = (
            f"its workload declares outputs {declared}"
            if declared
            else "its workload declares no outputs"
        )
        raise NotFoundError(
            f"{run.id} ({run.phase}) has no committed outputs yet; {why}, "
            "captured when a stage succeeds"
        )
    written = download_outputs(store, manifests, args.to)
    source = ",".join(m.id for m in manifests)
    return _report_written(args, written_json(source, "outputs", args.to, written))


def _report_written(args, report: dict[str, Any]) -> int:
    if args.json:
        output.print_json(report)
    else:
        output.say(
            f"wrote {len(report['files'])} file(s) of {report['snapshot']} "
            f"({report['artifact']}) into {report['to']}, verified"
        )
    return 0


# --- pin / release ------------------------------------------------------------------------------


def _pin(args) -> int:
    from nodus.retention import holds

    located = _lookup(args).locate(args.ref)
    added = holds.pin(located.store, located.manifest)
    note = "pinned" if added else "was already pinned"
    return _report_holds(args, located, f"{located.manifest.id} {note}")


def _release(args) -> int:
    from nodus.retention import holds

    located = _lookup(args).locate(args.ref)
    holds.check_release(located.manifest, located.run)
    epoch = holds.is_epoch_save(located.manifest, located.run)
    dropped = holds.release(located.store, located.manifest, epoch)
    note = f"released ({' and '.join(dropped)} hold)" if dropped else "had no pin or epoch hold"
    return _report_holds(args, located, f"{located.manifest.id} {note}")


def _report_holds(args, located, message: str) -> int:
    from nodus.inventory.listing import describe

    lookup = _lookup(args)
    data = describe(lookup, located, verify=False)
    if args.json:
        output.print_json({"id": data["id"], "pinned": data["pinned"], "holds": data["holds"]})
    else:
        remaining = ", ".join(h["type"] for h in data["holds"]) or "none"
        output.say(f"{message}; holds now: {remaining}")
    return 0


# --- plot ---------------------------------------------------------------------------------------


def _plot(args) -> int:
    from nodus.inventory.plot import collect, draw

    lookup = _lookup(args)
    run = lookup.run(args.run)
    series = collect(lookup.store_of_run(run), lookup.catalog, run)
    drawn = draw(run, series, args.out)
    snapshots = sum(len(s.snapshots) for s in series)
    output.say(
        f"drew {', '.join(drawn) or 'the snapshots'} of {run.id} ({snapshots} snapshot(s)) "
        f"into {args.out}"
    )
    return 0


# --- formatting ---------------------------------------------------------------------------------


def _epoch(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _kinds(row: dict[str, Any]) -> str:
    held = [f"{kind} {human_bytes(size)}" for kind, size in row["bytes_by_kind"].items()]
    return ", ".join(held + [f"{kind} deleted" for kind in row["deleted_kinds"]])


def _metrics(metrics: dict[str, Any]) -> str:
    shown = []
    for name in sorted(metrics):
        value = metrics[name]
        if name == "epoch":
            continue
        shown.append(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}")
    return " ".join(shown)
