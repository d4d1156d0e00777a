"""``nodus validate``, ``nodus resolve`` and ``nodus schema``: the workload file commands.

Handlers import the schemas package (and pydantic) only when they run, so building the parser
for any other command stays cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def register(commands: Any, groups: dict[str, Any], common: argparse.ArgumentParser) -> None:
    validate = commands.add_parser(
        "validate",
        parents=[common],
        help="check a workload file",
        description="Check a workload file against every rule; exit 2 listing all problems.",
    )
    validate.add_argument("file", metavar="FILE", help="the workload file (TOML)")
    validate.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document: every problem with its path, value and fix",
    )
    validate.set_defaults(handler=_validate)

    resolve = commands.add_parser(
        "resolve",
        parents=[common],
        help="print the resolved workload",
        description="Print the workload with every default and inherited value applied, as "
        "a run would store it, and the sources a run would capture now: excludes in force, "
        "size, largest files (or, with --submission, what the SDK would submit).",
    )
    resolve.add_argument("file", metavar="FILE", help="the workload file (TOML)")
    output = resolve.add_mutually_exclusive_group()
    output.add_argument(
        "--json", dest="format", action="store_const", const="json", help="print JSON (the default)"
    )
    output.add_argument(
        "--toml", dest="format", action="store_const", const="toml", help="print TOML"
    )
    resolve.add_argument(
        "--submission",
        action="store_true",
        help="print what the SDK submits: omission kept, nothing resolved",
    )
    resolve.set_defaults(handler=_resolve, format="json")

    schema = commands.add_parser(
        "schema",
        parents=[common],
        help="print the JSON Schema of workload files",
        description="Print a JSON Schema of workload files, for editors.",
    )
    schema.set_defaults(handler=_schema)


def _validate(args: argparse.Namespace) -> int:
    from nodus.cli import output
    from nodus.schemas.loader import resolve_file
    from nodus.stages.directory import capture_plan

    if args.json:
        return _validate_json(args.file)
    stages = resolve_file(args.file).stages
    count = len(stages)
    print(f"{args.file}: ok ({count} stage{'' if count == 1 else 's'})")
    for stage in stages:  # when its snapshots are taken, and at which step
        paths = ", ".join(stage.continuity.checkpoint_paths)
        print(f"  {stage.name}: captures {paths} ({stage.continuity.mode})")
        for line in capture_plan(stage):
            print(f"    {line}")
    for warning in protection_warnings(stages):  # what can be told before it runs
        output.say(warning)
    return 0


def _validate_json(file: str) -> int:
    """``validate --json``: the same checks and exit status as the text, as one document on
    stdout: ``{valid: false, file, problems[{path, value, fix, suggestion}]}``, or for a valid
    file ``{valid: true, file, name, stages[{name, mode, captures, plan}], warnings}``."""
    from nodus.errors import NodusError, Problem, WorkloadError
    from nodus.schemas.loader import resolve_file
    from nodus.stages.directory import capture_plan

    try:
        resolved = resolve_file(file)
    except WorkloadError as error:
        return _print_refusal(file, error.problems, error.exit_status)
    except NodusError as error:  # refused outside the file's rules: said as a problem too
        return _print_refusal(file, [Problem("", str(error))], error.exit_status)
    stages = [
        {
            "name": stage.name,
            "mode": stage.continuity.mode,
            "captures": list(stage.continuity.checkpoint_paths),
            "plan": capture_plan(stage),
        }
        for stage in resolved.stages
    ]
    warnings = [text.removeprefix("warning: ") for text in protection_warnings(resolved.stages)]
    document = {"valid": True, "file": file, "name": resolved.name}
    _print_document({**document, "stages": stages, "warnings": warnings})
    return 0


def _print_refusal(file: str, problems: list[Any], status: int) -> int:
    problem_dicts = [problem.to_dict() for problem in problems]
    _print_document({"valid": False, "file": file, "problems": problem_dicts})
    return status


def _print_document(data: dict[str, Any]) -> None:
    """A value that JSON has no type for (a TOML date) is written as its repr."""
    print(json.dumps(data, indent=2, ensure_ascii=False, default=repr))


def protection_warnings(stages: Any) -> list[str]:
    """Stages whose protection depends on what the program does, said before it runs."""
    from nodus.protocol import INTEGRATION_AUTO

    return [
        f'warning: stage {stage.name!r}: integration = "auto" runs a Trainer outside the '
        "hf-trainer-v1 profile unprepared, and then only what the program saves by itself into "
        f"{', '.join(stage.continuity.checkpoint_paths)} protects it (the run's final line says "
        'so when nothing did); integration = "hf-trainer-v1" refuses such a program instead'
        for stage in stages
        if stage.integration == INTEGRATION_AUTO and stage.continuity.mode == "checkpointed"
    ]


def _resolve(args: argparse.Namespace) -> int:
    from nodus.schemas.loader import load_workload, resolve_file

    if args.submission:
        data = load_workload(args.file).submission()
    else:
        resolved = resolve_file(args.file)
        data = {**resolved.to_dict(), "sources": _sources(args, resolved)}
    sys.stdout.write(_render(data, args.format))
    return 0


def _sources(args: argparse.Namespace, resolved: Any) -> list[dict[str, Any]]:
    """What ``nodus run`` would capture now (measured, never copied); what it would say of it,
    a warning or a refusal, goes to stderr."""
    from nodus.cli import output
    from nodus.runner.workspace import source
    from nodus.schemas import defaults

    home = defaults.nodus_home(args.home)
    private = source.private_folders(home, defaults.store_url(args.store, home))
    found = source.sources(resolved.stages, private)
    for text in source.refusals(found, resolved.stages):
        output.say(f"`nodus run` would refuse this workload: {text}")
    for item in found:
        for warning in item.warnings():
            output.say(warning)
    for warning in source.credential_warnings(resolved.stages):
        output.say(warning)
    return [item.to_dict() for item in found]


def _render(data: dict[str, Any], fmt: str) -> str:
    if fmt == "toml":
        import tomli_w

        return tomli_w.dumps(_without_none(data))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _without_none(value: Any) -> Any:
    """TOML has no null: an absent key or table means the same (``integration``, ``method``)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _schema(args: argparse.Namespace) -> int:
    from nodus.schemas.jsonschema import workload_json_schema

    sys.stdout.write(json.dumps(workload_json_schema(), indent=2) + "\n")
    return 0
