"""``nodus models list|get|alias|download|delete`` and ``nodus snapshots candidate|register``.

The work is done by :class:`nodus.Client` (:mod:`nodus.inventory.models`, :mod:`nodus.registry`);
handlers parse, call and print. ``--json`` shapes are documented in docs/cli.md.
"""

from __future__ import annotations

import argparse

from nodus.cli import output

__all__ = ["register"]

_REF_HELP = "NAME (its newest version), NAME:VERSION or NAME@ALIAS"
_SNAPSHOT_HELP = "snapshot id (ckpt_…), RUN@STEP or RUN/STAGE@STEP (RUN: run id or key)"


def register(commands, groups, common: argparse.ArgumentParser) -> None:
    models = groups["models"]
    listing = _add(models, "list", "every model version", common, _list)
    _json(listing)

    get = _add(models, "get", "one model version: where it came from, its files", common, _get)
    get.add_argument("ref", metavar="REF", help=_REF_HELP)
    _json(get)

    alias = _add(models, "alias", "point an alias at a version (moves it)", common, _alias)
    alias.add_argument("name", metavar="NAME")
    alias.add_argument("version", metavar="VERSION")
    alias.add_argument("alias", metavar="ALIAS")
    _json(alias)

    download = _add(
        models, "download", "download a version's weights into a folder (verified)", common, _pull
    )
    download.add_argument("ref", metavar="REF", help=_REF_HELP)
    download.add_argument("--to", required=True, metavar="DIR", help="a new or empty folder")
    _json(download)

    delete = _add(
        models, "delete", "remove a version and its aliases (gc frees its space)", common, _delete
    )
    delete.add_argument("ref", metavar="NAME:VERSION")
    _json(delete)

    snapshots = groups["snapshots"]
    cand = _add(snapshots, "candidate", "the model version of an epoch save", common, _candidate)
    cand.add_argument("ref", metavar="SNAPSHOT", help=_SNAPSHOT_HELP)
    _json(cand)

    reg = _add(
        snapshots, "register", "register a snapshot's weights as a model version", common, _reg
    )
    reg.add_argument("ref", metavar="SNAPSHOT", help=_SNAPSHOT_HELP)
    reg.add_argument("--model", metavar="NAME", help="model name (default: the run's name)")
    _json(reg)


def _add(group, name: str, help_text: str, common, handler):
    parser = group.add_parser(name, parents=[common], help=help_text, description=help_text)
    parser.set_defaults(handler=handler)
    return parser


def _json(parser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _line(version: dict) -> str:
    """``tiny:2  run_…@24  epoch 2  (run's model, newest, @prod)``."""
    marks = [f"@{alias}" for alias in version["aliases"]]
    if version["run_model"]:
        marks.insert(0, "run's model")
    if version.get("newest"):
        marks.append("newest")
    epoch = f"  epoch {version['epoch']:g}" if version["epoch"] is not None else ""
    note = f"  ({', '.join(marks)})" if marks else ""
    return f"{version['ref']}  {version['run']}@{version['step']}{epoch}  {version['origin']}{note}"


# --- handlers -----------------------------------------------------------------------------------


def _list(args) -> int:
    rows = output.client(args).models()
    if args.json:
        output.print_json(rows)
        return 0
    if not rows:
        print("no model versions yet (a run registers its model when it succeeds)")
    for row in rows:
        print(_line(row))
    return 0


def _get(args) -> int:
    data = output.client(args).model(args.ref)
    if args.json:
        output.print_json(data)
        return 0
    print(_line(data))
    print(f"  snapshot {data['snapshot']} in {data['store']}")
    for item in data["files"]:
        print(f"  {item['path']}  {item['size']}  {item['hash']}")
    return 0


def _alias(args) -> int:
    data = output.client(args).alias_model(args.name, args.version, args.alias)
    if args.json:
        output.print_json(data)
    else:
        output.say(f"{args.name}@{args.alias} -> {data['ref']}")
    return 0


def _pull(args) -> int:
    data = output.client(args).download_model(args.ref, args.to)
    if args.json:
        output.print_json(data)
    else:
        output.say(f"{data['model']}: {len(data['files'])} file(s) written to {data['to']}")
    return 0


def _delete(args) -> int:
    data = output.client(args).delete_model(args.ref)
    if args.json:
        output.print_json(data)
    else:
        later = "; the rest is freed by `nodus gc`" if data["deferred"] else ""
        output.say(f"deleted {data['ref']}: {data['freed_bytes']} bytes freed{later}")
    return 0


def _candidate(args) -> int:
    data = output.client(args).candidate(args.ref)
    if args.json:
        output.print_json(data)
    elif data["version"] is not None:
        print(f"{data['version']}  epoch {data['epoch']:g}  step {data['step']}")
    else:
        output.say(data["reason"])
    return 0


def _reg(args) -> int:
    data = output.client(args).register(args.ref, args.model)
    if args.json:
        output.print_json(data)
    elif data["new"]:
        output.say(f"registered {data['snapshot']} as {data['ref']}")
    else:
        output.say(f"{data['snapshot']} is already {data['ref']}")
    return 0
