"""``nodus qualify``: run the hf-trainer-v1 qualification suite on this environment.

The suite (``nodus.qualify``) trains the quick-start Trainer program uninterrupted, then
under the real runner with SIGKILLs at several steps and in the middle of a save, each recovered
by the runner; the environment qualifies when the final weights are bit-identical. The result is
recorded in ``$NODUS_HOME/qualified.json``, which explicit ``integration = "hf-trainer-v1"``
consults before it prepares a program.

``--extension NAME`` (repeatable; ``all``) runs the same suite for extensions of the profile
(bf16, several processes, dataloader workers, the masking collators, PEFT, TRL's
SFTTrainer and DPOTrainer) instead, each recorded
for this machine's device type.
"""

from __future__ import annotations

import sys


def register(commands, groups, common) -> None:
    parser = commands.add_parser(
        "qualify",
        parents=[common],
        help="run the hf-trainer-v1 qualification suite on this environment",
        description="Train a tiny Transformers Trainer program uninterrupted and interrupted "
        "(SIGKILL at several steps and during a save), require bit-identical final weights, "
        "and record the result under $NODUS_HOME.",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--extension",
        action="append",
        metavar="NAME",
        choices=[*EXTENSION_NAMES, "all"],
        help="qualify this extension of the profile instead (repeatable; all: every one): "
        + "; ".join(f"{name}: {e.summary}" for name, e in _extensions().items()),
    )
    parser.set_defaults(handler=handle)


def _extensions():
    from nodus.stages.hf.extensions import EXTENSIONS

    return EXTENSIONS


EXTENSION_NAMES = (
    "mixed-precision",
    "processes",
    "dataloader-workers",
    "collators",
    "peft",
    "trl",
)
"""The choices of ``--extension``, spelled here so ``nodus --help`` imports nothing more
(tests/hf/test_qualify.py keeps them equal to ``extensions.EXTENSIONS``)."""


def handle(args) -> int:
    from nodus.cli import output
    from nodus.qualify import qualify
    from nodus.schemas import defaults
    from nodus.stages.hf.qualification import current_versions, describe

    home = defaults.nodus_home(args.home)
    versions = current_versions()
    chosen = args.extension or []
    cases = list(EXTENSION_NAMES) if "all" in chosen else list(dict.fromkeys(chosen)) or [None]
    quiet = args.json or not sys.stderr.isatty()
    say = (lambda _line: None) if quiet else (lambda line: print(f"  {line}", file=sys.stderr))
    results = []
    for extension in cases:
        if not quiet:
            what = f"the extension {extension!r} on " if extension else ""
            print(f"qualifying {what}{describe(versions)}", file=sys.stderr)
        results.append(qualify(home, say=say, extension=extension))
    if args.json:
        shown = [_as_json(result, versions) for result in results]
        output.print_json(
            shown[0]
            if cases == [None]
            else {
                "passed": all(r.passed for r in results),
                "versions": versions,
                "extensions": {r.extension: s for r, s in zip(results, shown)},
            },
            sort_keys=True,
        )
    else:
        for result in results:
            _report(result, describe(versions))
    return 0 if all(r.passed for r in results) else 1


def _as_json(result, versions) -> dict:
    return {
        "passed": result.passed,
        "versions": versions,
        "device": result.device,
        "reference": result.reference,
        "resumed": result.resumed,
        "resumed_from": result.resumed_from,
        "attempts": result.attempts,
        "problems": result.problems,
        "record": result.record,
    }


def _report(result, versions: str) -> None:
    what = (
        f"the extension {result.extension!r} on {result.device} with " if result.extension else ""
    )
    if result.passed:
        print(
            f"qualified: {what}{versions} (resumed from steps "
            f"{', '.join(map(str, result.resumed_from))}; weights bit-identical); "
            f"recorded in {result.record}"
        )
    else:
        print(f"not qualified: {what}{versions}", file=sys.stderr)
        for problem in result.problems:
            print(f"  - {problem}", file=sys.stderr)
