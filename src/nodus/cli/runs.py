"""``nodus run`` and ``nodus runs list|get|wait|cancel|pause|logs|resume``.

Every command that names a run takes its id or its ``--key``. Nothing heavy is imported at
module level: ``nodus runs list`` is called from shells and cron and must answer at once; the
runner and the store are imported inside the handlers that need them.

``--json`` shapes are documented in docs/recovery.md; ``runs get --json`` is the reference
shape (``id, key, name, phase, exit_status, pause, stages[{name, phase, attempts}],
events[{type, at}]``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


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
    run.set_defaults(handler=_run)

    runs = groups["runs"]
    _parser(runs, "list", "recent runs, newest first", common, _list, ref=False).add_argument(
        "--limit", type=int, default=50, help="how many runs to show (default 50)"
    )
    _parser(runs, "get", "one run: stages, attempts, events", common, _get)
    wait = _parser(runs, "wait", "wait until a run stops (waits through RECOVERING)", common, _wait)
    wait.add_argument(
        "--exit-status",
        action="store_true",
        help="exit with the run's status (0, 1, 3, 4) instead of 0",
    )
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
    resume = _parser(
        runs, "resume", "resume an interrupted, paused or runner-less run", common, _resume
    )
    resume.add_argument("--step", type=int, help="restore the snapshot of this step")
    resume.add_argument("--detach", action="store_true", help="run in the background")


def _parser(group, name: str, help_text: str, common, handler, ref: bool = True):
    parser = group.add_parser(name, parents=[common], help=help_text, description=help_text)
    if ref:
        parser.add_argument("run", help="run id (run_…) or key")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=handler)
    return parser


def _home(args) -> str:
    from nodus.schemas import defaults

    return defaults.nodus_home(args.home)


def _catalog(args):
    from nodus.runner.catalog import Catalog

    return Catalog(_home(args))


def _say(text: str) -> None:
    print(f"nodus: {text}", file=sys.stderr, flush=True)


# --- nodus run / runs resume --------------------------------------------------------------------


def _run(args) -> int:
    from nodus.runner.service import run_file
    from nodus.schemas import defaults

    home = _home(args)
    terminal = sys.stderr if args.json else sys.stdout
    started = run_file(
        home,
        defaults.store_url(args.store, args.home),
        args.file,
        key=args.key,
        detach=args.detach,
        terminal=terminal,
        say=_say,
    )
    return _report_started(args, started)


def _resume(args) -> int:
    from nodus.runner.service import resume_run

    terminal = sys.stderr if args.json else sys.stdout
    started = resume_run(
        _home(args), args.run, step=args.step, detach=args.detach, terminal=terminal, say=_say
    )
    return _report_started(args, started)


def _report_started(args, started) -> int:
    catalog = _catalog(args)
    run = catalog.get_run(started.run_id)
    if args.json:
        print(json.dumps(run_json(catalog, run), indent=2))
    elif started.status is not None and started.reran:
        _say(f"{run.id} {run.phase}" + (f": {run.message}" if run.message else ""))
    return 0 if started.status is None else started.status


# --- runs list / get ----------------------------------------------------------------------------


def _list(args) -> int:
    runs = _catalog(args).list_runs(limit=args.limit)
    if args.json:
        print(json.dumps([_run_summary(run) for run in runs], indent=2))
        return 0
    rows = [("ID", "KEY", "NAME", "PHASE", "EXIT", "CREATED")]
    rows += [
        (r.id, r.key or "-", r.name, r.phase, _text(r.exit_status), r.created_at) for r in runs
    ]
    _table(rows)
    return 0


def _get(args) -> int:
    catalog = _catalog(args)
    run = catalog.get_run(args.run)
    data = run_json(catalog, run)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"{run.id}  {run.name}  {run.phase}  exit {_text(run.exit_status)}"
        + (f"  key {run.key}" if run.key else "")
    )
    if run.message:
        print(f"  {run.message}")
    if data["pause"]:
        print(_pause_line(data["pause"]))
    for stage in data["stages"]:
        print(
            f"stage {stage['name']}: {stage['phase']}, {len(stage['attempts'])} attempt(s), "
            f"{stage['recoveries']} recovery(ies)"
        )
        for attempt in stage["attempts"]:
            restored = (
                f" from step {attempt['restored_step']}"
                if attempt["restored_step"] is not None
                else ""
            )
            print(
                f"  attempt {attempt['number']}{restored}: {attempt['outcome'] or 'running'}"
                f" ({attempt['detail'] or '-'})"
            )
    print("events:")
    for event in data["events"]:
        extra = {k: v for k, v in event.items() if k not in ("type", "at", "stage", "attempt")}
        print(f"  {event['at']}  {event['type']}  {json.dumps(extra) if extra else ''}")
    return 0


def run_json(catalog, run) -> dict[str, Any]:
    """The stable ``runs get --json`` shape."""
    data = _run_summary(run)
    data.update(
        message=run.message,
        store=run.store,
        updated_at=run.updated_at,
        finished_at=run.finished_at,
        runner={"pid": run.runner_pid, "host": run.runner_host},
        pause=pause_json(catalog.latest_pause(run.id)),
    )
    data["stages"] = [
        {
            "name": s["name"],
            "phase": s["phase"],
            "recoveries": s["recoveries"],
            "source_snapshot": s["source_snapshot"],
            "attempts": [_attempt_json(a) for a in s["attempts"]],
        }
        for s in run.stages
    ]
    data["events"] = [
        {
            **event["details"],
            "type": event["type"],
            "at": event["at"],
            "stage": event["stage"],
            "attempt": event["attempt"],
        }
        for event in catalog.events(run.id)
    ]
    return data


def _run_summary(run) -> dict[str, Any]:
    return {
        "id": run.id,
        "key": run.key,
        "name": run.name,
        "phase": run.phase,
        "exit_status": run.exit_status,
        "created_at": run.created_at,
    }


def pause_json(pause: dict | None) -> dict[str, Any] | None:
    """The ``pause`` object of ``runs get --json``: the run's newest pause, or null."""
    if pause is None:
        return None
    keys = (
        "policy",
        "state",
        "requested_at",
        "accepted_at",
        "deadline",
        "timed_out",
        "failure",
        "resources_released",
        "ended_at",
    )
    data = {key: pause[key] for key in keys}
    data["save"] = {
        "bytes": pause["save_bytes"],
        "snapshot": pause["snapshot"],
        "step": pause["step"],
    }
    return data


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


def _attempt_json(attempt: dict) -> dict[str, Any]:
    keys = (
        "number",
        "outcome",
        "detail",
        "restored_snapshot",
        "restored_step",
        "devices",
        "started_at",
        "ended_at",
        "log_path",
    )
    return {key: attempt[key] for key in keys}


# --- runs wait / cancel -------------------------------------------------------------------------


def _wait(args) -> int:
    from nodus.errors import PausedError

    catalog = _catalog(args)
    run = catalog.get_run(args.run)
    while not run.finished:
        if _runner_gone(args, run):
            hint = f"nodus run FILE --key {run.key}" if run.key else f"nodus runs resume {run.id}"
            raise PausedError(
                f"{run.id} is {run.phase} but its runner is gone; `{hint}` recovers it"
            )
        time.sleep(_poll())
        run = catalog.get_run(run.id)
    if args.json:
        print(json.dumps(run_json(catalog, run), indent=2))
    else:
        print(f"{run.id} {run.phase}" + (f": {run.message}" if run.message else ""))
    return run.exit_status if args.exit_status else 0


def _runner_gone(args, run) -> bool:
    """No process holds the run's lock (a QUEUED run gets a moment to be picked up)."""
    from datetime import datetime

    from nodus.runner.locks import RunLock
    from nodus.schemas import defaults

    if RunLock(_home(args), run.lock_name, run.id).is_held_elsewhere():
        return False
    if run.phase == "QUEUED":
        created = datetime.fromisoformat(run.created_at.replace("Z", "+00:00"))
        return time.time() - created.timestamp() > defaults.QUEUED_ORPHAN_S
    return True


def _cancel(args) -> int:
    from nodus.errors import UsageError
    from nodus.runner.catalog import RESUMABLE
    from nodus.runner.locks import RunLock
    from nodus.schemas import defaults

    catalog = _catalog(args)
    run = catalog.get_run(args.run)
    if run.finished and run.phase not in RESUMABLE:
        raise UsageError(f"{run.id} has already finished ({run.phase}); nothing to cancel")
    lock = RunLock(_home(args), run.lock_name, run.id)
    if lock.is_held_elsewhere():
        catalog.request(run.id, "cancel")
        _say(f"asked the runner of {run.id} to cancel it; waiting for it to stop")
        grace = max(s["execution"]["grace_period"] for s in run.workload["stages"])
        deadline = time.monotonic() + grace + defaults.KILL_WAIT_S + 30
        while not run.finished and time.monotonic() < deadline:
            time.sleep(_poll())
            run = catalog.get_run(run.id)
    else:
        with lock:  # no runner: cancel it here, holding its lock so none starts meanwhile
            from nodus.runner.containment import kill_survivors

            kill_survivors(catalog, run.id)  # what a dead runner's attempt left running
            catalog.set_phase(run.id, "CANCELLED", message="cancelled by `nodus runs cancel`")
            _cancel_open_pause(catalog, run.id)
        run = catalog.get_run(run.id)
    if args.json:
        print(json.dumps(run_json(catalog, run), indent=2))
    else:
        print(f"{run.id} {run.phase}")
    return 0 if run.phase == "CANCELLED" else 1


def _cancel_open_pause(catalog, run_id: str) -> None:
    """A pause its runner never carried out ends with the cancel (cancellation wins)."""
    from nodus.runner.catalog import now

    pause = catalog.latest_pause(run_id)
    if pause is not None and pause["state"] in ("requested", "pausing"):
        catalog.update_pause(
            pause["id"],
            state="cancelled",
            ended_at=now(),
            failure="cancelled before the pause completed",
        )


def _pause(args) -> int:
    from nodus.runner.pause_request import parse_duration, request_pause, wait_accepted
    from nodus.schemas import defaults

    deadline_s = parse_duration(args.deadline) if args.deadline else defaults.PAUSE_DEADLINE_S
    home = _home(args)
    pause = request_pause(home, args.run, args.checkpoint, deadline_s)
    pause = wait_accepted(home, pause["run_id"], pause["id"]) or pause
    if args.json:
        print(json.dumps(pause_json(pause), indent=2))
        return 0
    taken = (
        "accepted by its runner"
        if pause["state"] != "requested"
        else "recorded; its runner takes it up at its next look"
    )
    print(
        f"pause of {pause['run_id']} (--checkpoint {pause['policy']}, deadline "
        f"{pause['deadline']}) {taken}; saving and release continue in the background: "
        f"`nodus runs wait {pause['run_id']}` follows it"
    )
    return 0


# --- runs logs ----------------------------------------------------------------------------------


def _logs(args) -> int:
    catalog = _catalog(args)
    run = catalog.get_run(args.run)
    offsets: dict[tuple[str, int], int] = {}
    while True:
        finished = run.finished  # read before draining, so the last lines are never missed
        for stage in run.stages:
            for attempt in stage["attempts"]:
                if _wanted(args, stage["name"], attempt["number"]):
                    _print_log(args, stage["name"], attempt, offsets, whole=finished)
        if not args.follow or finished:
            return 0
        time.sleep(_poll())
        run = catalog.get_run(run.id)


def _wanted(args, stage: str, number: int) -> bool:
    return (args.stage in (None, stage)) and (args.attempt in (None, number))


def _print_log(args, stage: str, attempt: dict, offsets: dict, whole: bool) -> None:
    where = (stage, attempt["number"])
    path = attempt["log_path"]
    if not path:
        return
    try:
        with open(path, "rb") as handle:
            handle.seek(offsets.get(where, 0))
            data = handle.read()
    except FileNotFoundError:
        return
    if where not in offsets and not args.json:
        print(f"==> {stage}, attempt {attempt['number']} <==")
    # While following, print whole lines only; the rest comes with the next look.
    complete = data if whole or not args.follow else data[: data.rfind(b"\n") + 1]
    offsets[where] = offsets.get(where, 0) + len(complete)
    for line in complete.decode("utf-8", errors="replace").splitlines():
        if args.json:
            print(json.dumps({"stage": stage, "attempt": attempt["number"], "line": line}))
        else:
            print(line)
    sys.stdout.flush()


# --- helpers ------------------------------------------------------------------------------------


def _poll() -> float:
    from nodus.schemas import defaults

    return defaults.WAIT_POLL_S


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _table(rows: list[tuple]) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())
