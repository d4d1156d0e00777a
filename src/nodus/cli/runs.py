"""``nodus run`` and ``nodus runs list|get|wait|cancel|pause|logs|resume|branch``.

Every command that names a run takes its id or its ``--key``. The work is done by
:class:`nodus.Client` (and the runner under it); handlers parse, call, print and pick the exit
status. Nothing heavy is imported at module level: ``nodus runs list`` is called from shells and
cron and must answer at once.

``--json`` prints the dicts the Client returns, built in :mod:`nodus.inventory.runs` and
documented in docs/cli.md; ``runs get --json`` is the reference shape (``id, key, name, phase,
exit_status, parent, children, pause, stages[{name, phase, launch, attempts}],
events[{type, at}]``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from nodus import protocol
from nodus.cli import output
from nodus.schemas.units import human_bytes

WAIT_TIMED_OUT = 124
"""``runs wait --timeout``'s exit status when the time ran out first: GNU ``timeout``'s, and
none of the run's own (0, 1, 3, 4) or a refusal's (2)."""


def register(commands, groups, common) -> None:
    run = commands.add_parser(
        "run",
        parents=[common],
        help="run a workload file under supervision",
        description="Accept a workload file as a run and drive it: stages, snapshots, recovery.",
    )
    run.add_argument("file", help="the workload file (TOML)")
    run.add_argument("--key", help="idempotency key: the same key continues the same run")
    run.add_argument("--detach", action="store_true", help="run in the background")
    run.add_argument("--json", action="store_true", help="print the run as JSON at the end")
    run.add_argument(
        "--resume-from",
        metavar="REF",
        help="start from a finished run's snapshot (RUN@STEP or a snapshot id): its training "
        "state, as resume_from in the file",
    )
    _placement_options(run, "every stage's [execution] backend, stored with the run")
    _quiet_option(run)
    run.set_defaults(handler=_run)

    runs = groups["runs"]
    listing = _parser(runs, "list", "recent runs, newest first", common, _list, ref=False)
    listing.add_argument("--limit", type=int, default=50, help="how many runs to show (default 50)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many of the newest")
    listing.add_argument(
        "--phase",
        type=str.upper,  # a phase is one word whatever its case: succeeded = SUCCEEDED
        help="only runs in this phase (SUCCEEDED, FAILED, PAUSED, …; any case)",
    )
    listing.add_argument("--name", help="only runs whose name, id or key holds this text")
    listing.add_argument(
        "--tree", action="store_true", help="draw the lineage: each run under its parent"
    )
    _branch_parser(runs, common)
    _parser(runs, "get", "one run: stages, attempts, events", common, _get)
    wait = _parser(runs, "wait", "wait until a run stops (waits through RECOVERING)", common, _wait)
    wait.add_argument(
        "--exit-status",
        action="store_true",
        help="exit with the run's status (0, 1, 3, 4) instead of 0",
    )
    wait.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help=f"stop waiting after this many seconds: exit {WAIT_TIMED_OUT}, the run goes on",
    )
    _quiet_option(wait)
    _parser(runs, "cancel", "cancel a run (its program is stopped)", common, _cancel)
    pause = _parser(
        runs, "pause", "pause a run: save (or keep the newest snapshot) and stop", common, _pause
    )
    pause.add_argument(
        "--checkpoint",
        required=True,
        choices=("save", "latest"),
        help="save: save at the next optimizer boundary, then stop; latest: "
        "stop now, a resume repeats the updates after the newest snapshot",
    )
    pause.add_argument(
        "--deadline", help="mark the pause timed out after this long (30s, 10m, 1h; default 10m)"
    )
    logs = _parser(runs, "logs", "the program output of a run, per attempt", common, _logs)
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until it stops")
    logs.add_argument("--stage", help="only this stage")
    logs.add_argument("--attempt", type=int, help="only this attempt number")
    logs.add_argument(
        "--raw",
        action="store_true",
        help="the bytes as the program wrote them (progress bars' frames, escapes); "
        "the attempts' headers go to stderr",
    )
    resume = _parser(
        runs, "resume", "resume an interrupted, paused or runner-less run", common, _resume
    )
    resume.add_argument("--step", type=int, help="restore the snapshot of this step")
    resume.add_argument("--detach", action="store_true", help="run in the background")
    _placement_options(resume, "the stages' backend for this resume")
    _quiet_option(resume)
    _parser(
        runs, "delete", "remove a finished run's snapshots, outputs and records", common, _delete
    )


def _branch_parser(runs, common) -> None:
    branch = _parser(
        runs,
        "branch",
        "a new run from a finished run's snapshot: its training state, or its weights",
        common,
        _branch,
        ref=False,
    )
    branch.add_argument("snapshot", metavar="SNAPSHOT", help="ID, RUN@STEP or RUN/STAGE@STEP")
    branch.add_argument(
        "--from",
        dest="mode",
        required=True,
        choices=protocol.CONTINUATION_MODES,
        help="full-state: continue from the snapshot's training state; weights: start at step "
        "0 from its weights with fresh optimizer state (a warm start)",
    )
    branch.add_argument("--name", help="the new run's name (default: the parent's)")
    branch.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change outputs, env.VAR or execution.KEY of the parent's resolution (repeatable)",
    )
    branch.add_argument("--key", help="idempotency key: the same key continues the same run")
    branch.add_argument("--detach", action="store_true", help="run in the background")
    _quiet_option(branch)


def _quiet_option(parser) -> None:
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no line per committed snapshot (interruptions and recoveries are still said)",
    )


def _parser(group, name: str, help_text: str, common, handler, ref: bool = True):
    parser = group.add_parser(name, parents=[common], help=help_text, description=help_text)
    if ref:
        parser.add_argument("run", help="run id (run_…) or key")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=handler)
    return parser


# --- nodus run / runs resume --------------------------------------------------------------------


def _elsewhere(attempt: dict[str, Any]) -> str:
    """`` on NODE`` for an attempt that ran on another machine (a Ray node, a Slurm job's
    nodes, with the job's state), else ''."""
    import socket

    from nodus.inventory.runs import host_text

    host = attempt.get("host")
    return f" on {host_text(attempt)}" if host and host != socket.gethostname() else ""


def _placement_options(parser, replaces: str) -> None:
    """``--backend`` and every backend's drive options, as the backend registry declares them."""
    from nodus.schemas.backends import NAMES, drive_options

    parser.add_argument("--backend", choices=NAMES, help=f"where attempts run; replaces {replaces}")
    for option in drive_options():
        parser.add_argument(option.flag, metavar=option.metavar, help=option.help)


def _backend_options(args) -> dict[str, str | None]:
    """The drive options given, by flag: passed to the backends as they are."""
    from nodus.schemas.backends import drive_options

    return {option.flag: getattr(args, option.dest) for option in drive_options()}


def _run(args) -> int:
    run = output.client(args).run(
        args.file,
        key=args.key,
        detach=args.detach,
        resume_from=args.resume_from,
        backend=args.backend,
        backend_options=_backend_options(args),
    )
    return _report_started(args, run)


def _branch(args) -> int:
    run = output.client(args).branch(
        args.snapshot,
        args.mode,
        name=args.name,
        set=args.changes,
        key=args.key,
        detach=args.detach,
    )
    return _report_started(args, run)


def _resume(args) -> int:
    run = output.client(args).resume(
        args.run,
        step=args.step,
        detach=args.detach,
        backend=args.backend,
        backend_options=_backend_options(args),
    )
    return _report_started(args, run)


def _report_started(args, run: dict[str, Any]) -> int:
    """The run's exit status; 0 for a run handed to a background runner (it has none yet)."""
    if args.json:
        output.print_json(run)
    return run["exit_status"] or 0


# --- runs list / get ----------------------------------------------------------------------------


def _list(args) -> int:
    from nodus.inventory.runs import lineage_tree

    runs = output.client(args).runs(
        limit=args.limit, offset=args.offset, phase=args.phase, name=args.name
    )
    if args.json:
        output.print_json(runs)
        return 0
    drawn = lineage_tree(runs) if args.tree else [(0, run) for run in runs]
    rows = [("ID", "KEY", "NAME", "PHASE", "EXIT", "CREATED", "DURATION", "STEP", "LOSS", "FROM")]
    rows += [
        (
            "  " * depth + r["id"],
            r["key"] or "-",
            r["name"],
            r["phase"] + (" (runner gone)" if r["runner"] == "gone" else ""),
            output.text(r["exit_status"]),
            r["created_at"],
            _duration_text(r),
            _step_text(r),
            "-" if r["loss"] is None else f"{r['loss']:.4g}",
            _parent_text(r["parent"]),
        )
        for depth, r in drawn
    ]
    output.table(rows)
    return 0


def _duration_text(row: dict) -> str:
    """``3 min 20 s``; ``-`` for a run no attempt of which started yet."""
    from nodus.schemas.units import human_duration

    seconds = row["duration_seconds"]
    return "-" if seconds is None else human_duration(seconds)


def _step_text(row: dict) -> str:
    """``120``, ``capture 3`` (a counted step), or ``-``."""
    if row["capture"] is not None:
        return f"capture {row['capture']}"
    return output.text(row["step"])


def _parent_text(parent: dict | None) -> str:
    """``run_…@40 full-state``: the snapshot a run started from, or ``-``."""
    if not parent:
        return "-"
    return f"{parent['run']}@{parent['step']} {parent['mode']}"


def _get(args) -> int:
    data = output.client(args).get(args.run)
    if args.json:
        output.print_json(data)
        return 0
    _show(
        f"{data['id']}  {data['name']}  {data['phase']}  exit {output.text(data['exit_status'])}"
        + (f"  key {data['key']}" if data["key"] else "")
    )
    for line in _state_lines(data):
        if line:
            _show(line)
    _show_lineage(data)
    _show_stages(data["stages"])
    _show("events:")
    for event in data["events"]:
        extra = {k: v for k, v in event.items() if k not in ("type", "at", "stage", "attempt")}
        _show(f"  {event['at']}  {event['type']}  {json.dumps(extra) if extra else ''}")
    return 0


def _state_lines(data: dict) -> list[str | None]:
    """The lines under a run's heading that say where it stands; ``None`` for those that do
    not apply (no message, a live runner, no progress yet, ...)."""
    from nodus.inventory.runs import progress_line, runner_line

    def indented(line: str | None) -> str | None:
        return f"  {line}" if line else None

    return [
        indented(data["message"]),
        indented(runner_line(data["runner"])),
        indented(_protection_text(data)),
        indented(_capture_failure_line(data)),
        indented(data.get("progress") and f"progress: {progress_line(data['progress'])}"),
        data["pause"] and _pause_line(data["pause"]),
        data.get("upload") and _upload_line(data["upload"], bar=sys.stdout.isatty()),
        indented(data.get("unrecorded") and _unrecorded_line(data["unrecorded"])),
    ]


def _show_lineage(data: dict) -> None:
    """The run it started from, the runs started from it, what it stores, its model."""
    if data["parent"]:
        parent = data["parent"]
        _show(
            f"  parent: {parent['run']} snapshot {parent['snapshot']} (stage {parent['stage']}, "
            f"step {parent['step']}), --from {parent['mode']}"
        )
    for child in data["children"]:
        _show(
            f"  child: {child['id']} {child['name']} {child['phase']} from step "
            f"{child['step']} ({child['snapshot']}), --from {child['mode']}"
        )
    stored = data["stored"]
    size = human_bytes(stored["bytes"])
    _show(f"  store: {stored['snapshots']} snapshot(s), {size} ({data['store']})")
    if data.get("model"):
        model = data["model"]
        _show(f"  model: {model['ref']} (step {model['step']}, snapshot {model['snapshot']})")


def _show_stages(stages: list[dict]) -> None:
    """Each stage with its launch and its attempts."""
    from nodus.inventory.runs import restored_text

    for stage in stages:
        _show(
            f"stage {stage['name']}: {stage['phase']}, {len(stage['attempts'])} attempt(s), "
            f"{stage['recoveries']} recovery(ies)"
        )
        if stage["launch"]:
            _show(_launch_line(stage["launch"]))
        for attempt in stage["attempts"]:
            from_ = restored_text(attempt)
            restored = f" from {from_}" if from_ is not None else ""
            _show(
                f"  attempt {attempt['number']}{restored}{_elsewhere(attempt)}: "
                f"{attempt['outcome'] or 'running'} ({attempt['detail'] or '-'})"
            )


def _protection_text(data: dict) -> str | None:
    """``protection: …``: a protected run names its newest snapshot, an unprotected one why."""
    from nodus.inventory.protection import PROTECTED, protection_line
    from nodus.runner.catalog.phases import Phase

    guarded = data.get("protection")
    if guarded is None:
        return None
    if guarded["state"] == PROTECTED:
        stage, step = guarded["stage"], guarded["step"]
        return f"protection: protected (stage {stage!r}, newest snapshot step {step})"
    weak = protection_line(guarded, stopped=Phase(data["phase"]).stopped)
    return f"protection: {weak}" if weak else None


def _show(line: str) -> None:
    """One line of a run's account on stdout, its control characters escaped: a key, a name or
    a message from a program is shown, never obeyed by the terminal."""
    print(output.printable(line))


def _delete(args) -> int:
    deleted = output.client(args).delete(args.run)
    if args.json:
        output.print_json(deleted)
    return 0


def _capture_failure_line(data: dict) -> str | None:
    """``runs get``'s line on failed captures, naming a newest capture that was not stored."""
    from nodus.inventory.runs import capture_failure_line

    line = capture_failure_line(data["capture_failures"])
    if line and not data["capture_failures"]["final_state_stored"]:
        line += "; the newest capture was not stored"
    return line


def _upload_line(upload: dict, bar: bool) -> str:
    """The upload queue to a remote store; with ``bar`` (a terminal) a progress bar too."""
    current = upload["uploading"]
    if current is None:
        now = "idle"
    else:
        what = "outputs" if current["role"] == "outputs" else f"step {current['step']}"
        done, total = current["bytes_done"], current["bytes_total"]
        now = f"uploading {what}: {human_bytes(done)} of {human_bytes(total)}"
        if bar:
            filled = int(20 * done / total) if total else 20
            now += f" [{'#' * filled}{'.' * (20 - filled)}] {100 * done // max(total, 1)}%"
    parts = [now, f"{upload['waiting']} waiting", f"{upload['skipped']} skipped"]
    parts.append(f"{upload['uploaded']} uploaded")
    if upload.get("error") and (current is not None or upload["waiting"]):
        parts.append(f"retrying after: {upload['error']}")
    return "  upload: " + ", ".join(parts)


def _unrecorded_line(unrecorded: list[dict]) -> str:
    """Saves that never reached the store: ``Unrecorded: step 40, step 50, outputs``."""
    named = [
        "outputs" if save["role"] == "outputs" else f"step {save['step']}" for save in unrecorded
    ]
    return "Unrecorded: " + ", ".join(named)


def _pause_line(pause: dict) -> str:
    save = pause["save"]
    acknowledged = (
        f", snapshot {save['snapshot']} at step {save['step']}" if save["snapshot"] else ""
    )
    flags = "".join(
        [
            ", timed out" if pause["timed_out"] else "",
            ", resources released" if pause["resources_released"] else "",
            f", failure: {pause['failure']}" if pause["failure"] else "",
        ]
    )
    return (
        f"pause --checkpoint {pause['policy']}: {pause['state']} (requested "
        f"{pause['requested_at']}, deadline {pause['deadline']}, {save['bytes']} bytes"
        f"{acknowledged}{flags})"
    )


def _launch_line(launch: dict) -> str:
    python = launch["python"]
    version = f" (Python {python.split()[0]})" if python else ""
    return f"  runs {launch['executable']}{version}, PATH {launch['path']}"


# --- runs wait / cancel / pause -----------------------------------------------------------------


def _wait(args) -> int:
    from nodus.errors import WaitTimeoutError
    from nodus.inventory.runs import capture_failure_line, phase_line

    try:
        data = _waited(args)
    except WaitTimeoutError as error:
        output.say(str(error))
        return WAIT_TIMED_OUT
    if args.json:
        output.print_json(data)
    else:
        _show(phase_line(data))
        failed = capture_failure_line(data["capture_failures"])
        if failed:
            output.say(failed)
    return data["exit_status"] if args.exit_status else 0


def _seconds(text: str) -> float:
    """``--timeout``'s value: seconds, a number 0 or more."""
    import argparse
    import math

    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds, 0 or more")
    return seconds


def _waited(args) -> dict[str, Any]:
    """``runs wait``'s wait; on a terminal under a live line of the run's progress."""
    from nodus.inventory.runs import progress_line

    watcher = output.client(args, say=lambda _: None)  # the live line's own, in its thread

    def line() -> str:
        progress = watcher.progress(args.run)
        return f"  {progress_line(progress)}" if progress else ""

    live = output.LiveLine(line)
    with live:
        said = live.say if live.enabled else output.say
        return output.client(args, say=said).wait(args.run, timeout=args.timeout)


def _cancel(args) -> int:
    from nodus.runner.catalog.phases import Phase

    data = output.client(args).cancel(args.run)
    if args.json:
        output.print_json(data)
    else:
        print(f"{data['id']} {data['phase']}")
    return 0 if data["phase"] == Phase.CANCELLED else 1


def _pause(args) -> int:
    pause = output.client(args).pause(args.run, checkpoint=args.checkpoint, deadline=args.deadline)
    if args.json:
        output.print_json(pause)
        return 0
    taken = (
        "accepted by its runner"
        if pause["state"] != "requested"
        else "recorded; its runner takes it up at its next look"
    )
    print(
        f"pause of {args.run} (--checkpoint {pause['policy']}, deadline "
        f"{pause['deadline']}) {taken}; saving and release continue in the background: "
        f"`nodus runs wait {args.run}` follows it"
    )
    return 0


# --- runs logs ----------------------------------------------------------------------------------


def _logs(args) -> int:
    from nodus.errors import UsageError
    from nodus.runner.catalog.phases import Phase

    if args.raw and args.json:
        raise UsageError("--raw prints the bytes as written, --json the lines shown: give one")
    client = output.client(args)
    run = client.get(args.run)
    _check_wanted(args, run, Phase(run["phase"]).stopped)
    followed: dict[tuple[str, int], _Followed] = {}
    while True:
        # Read before draining, so the last lines are never missed.
        finished = Phase(run["phase"]).stopped
        for stage in run["stages"]:
            for attempt in stage["attempts"]:
                if _wanted(args, stage["name"], attempt["number"]):
                    _print_log(args, stage["name"], attempt, followed, whole=finished)
        if not args.follow or finished:
            return 0
        time.sleep(_poll())
        run = client.get(run["id"])


def _check_wanted(args, run: dict, stopped: bool) -> None:
    """A ``--stage`` the run lacks, or an ``--attempt`` none of its stages made (and, while
    following a run that goes on, none may make yet), is the user's mistake, said in a line."""
    from nodus.errors import NotFoundError

    names = [stage["name"] for stage in run["stages"]]
    if args.stage is not None and args.stage not in names:
        raise NotFoundError(
            f"run {run['id']} has no stage {args.stage!r} (its stages: {', '.join(names)})"
        )
    if args.attempt is None or (args.follow and not stopped):
        return
    stages = [s for s in run["stages"] if args.stage in (None, s["name"])]
    numbers = sorted({a["number"] for s in stages for a in s["attempts"]})
    if args.attempt not in numbers:
        which = f"stage {args.stage!r} of run {run['id']}" if args.stage else f"run {run['id']}"
        made = f"its attempts: {', '.join(map(str, numbers))}" if numbers else "it has none yet"
        raise NotFoundError(f"{which} has no attempt {args.attempt} ({made})")


def _wanted(args, stage: str, number: int) -> bool:
    return (args.stage in (None, stage)) and (args.attempt in (None, number))


class _Followed:
    """How far one attempt's log was printed: the bytes read, and what a terminal would not
    show yet (a character cut by the read, the line after the last newline)."""

    def __init__(self) -> None:
        import codecs

        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""


def _print_log(args, stage: str, attempt: dict, followed: dict, whole: bool) -> None:
    from nodus.stages.terminal import collapse

    where = (stage, attempt["number"])
    path = attempt["log_path"]
    if not path:
        return
    try:
        with open(path, "rb") as handle:
            handle.seek(followed[where].offset if where in followed else 0)
            data = handle.read()
    except FileNotFoundError:
        return
    if where not in followed and not args.json:
        header = f"==> {stage}, attempt {attempt['number']} <=="
        print(header, file=sys.stderr if args.raw else sys.stdout, flush=True)
    state = followed.setdefault(where, _Followed())
    state.offset += len(data)
    if args.raw:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    # While following, a line is printed once it is whole: a bar's frames wait for its end.
    final = whole or not args.follow
    text = state.decoder.decode(data, final=final)
    lines, state.pending = collapse(state.pending, text, final=final)
    for line in lines:
        if args.json:
            print(json.dumps({"stage": stage, "attempt": attempt["number"], "line": line}))
        else:
            print(line)
    sys.stdout.flush()


# --- helpers ------------------------------------------------------------------------------------


def _poll() -> float:
    from nodus.runner.control.outside import WAIT_POLL_S

    return WAIT_POLL_S
