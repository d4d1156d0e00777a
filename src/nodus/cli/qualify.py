"""``nodus qualify``: run the hf-trainer-v1 qualification suite on this environment.

The suite (``nodus.runner.qualify``) trains the quick-start Trainer program uninterrupted, then
under the real runner with SIGKILLs at several steps and in the middle of a save, each recovered
by the runner; the environment qualifies when the final weights are bit-identical. The result is
recorded in ``$NODUS_HOME/qualified.json``, which explicit ``integration = "hf-trainer-v1"``
consults before it prepares a program.
"""

from __future__ import annotations

import json
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
    parser.set_defaults(handler=handle)


def handle(args) -> int:
    from nodus.runner.qualify import qualify
    from nodus.schemas import defaults
    from nodus.stages.hf.qualification import current_versions, describe

    home = defaults.nodus_home(args.home)
    versions = current_versions()
    quiet = args.json or not sys.stderr.isatty()
    say = (lambda _line: None) if quiet else (lambda line: print(f"  {line}", file=sys.stderr))
    if not quiet:
        print(f"qualifying {describe(versions)}", file=sys.stderr)
    result = qualify(home, say=say)
    if args.json:
        print(
            json.dumps(
                {
                    "passed": result.passed,
                    "versions": versions,
                    "reference": result.reference,
                    "resumed": result.resumed,
                    "resumed_from": result.resumed_from,
                    "attempts": result.attempts,
                    "problems": result.problems,
                    "record": result.record,
                },
                indent=2,
                sort_keys=True,
            )
        )
    elif result.passed:
        print(
            f"qualified: {describe(versions)} (resumed from steps "
            f"{', '.join(map(str, result.resumed_from))}; weights bit-identical); "
            f"recorded in {result.record}"
        )
    else:
        print(f"not qualified: {describe(versions)}", file=sys.stderr)
        for problem in result.problems:
            print(f"  - {problem}", file=sys.stderr)
    return 0 if result.passed else 1
