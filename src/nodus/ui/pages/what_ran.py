"""What a run's page says ran and how it is doing: per stage its command, interpreter and the
program's arguments (a Trainer's ``TrainingArguments`` from its ``training_arguments`` event,
a managed method's settings, a directory-contract program's command line), the workload as
nodus resolved it, and the running attempts' CPU, memory and GPUs (:meth:`Client.usage`)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from nodus import protocol
from nodus.schemas.units import human_bytes
from nodus.ui.html import Markup, join, tag

__all__ = ["HYPERPARAMETERS", "gpu_text", "program_arguments", "usage_section", "what_ran_section"]

HYPERPARAMETERS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "warmup_ratio",
    "weight_decay",
    "optim",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "seed",
    "bf16",
    "fp16",
    "output_dir",
)
"""The Trainer arguments shown first; every other one is under "all N arguments"."""


def program_arguments(command: list[str], python: bool) -> list[str]:
    """The arguments the program itself reads: a Python launch's after its script (or ``-m
    MODULE``), any other command's after its first word."""
    if not python:
        return command[1:]
    rest = command[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
        rest = rest[1:]  # the interpreter's own options (-u, -X dev…)
    return rest[2:] if rest[:1] in (["-m"], ["-c"]) else rest[1:]


def what_ran_section(run: dict[str, Any], workload: dict[str, Any]) -> Markup:
    stages = {stage["name"]: stage for stage in workload.get("stages") or []}
    parts: list[Any] = [tag("h2", None, "What ran")]
    for stage in run["stages"]:
        parts.append(_stage(stage, stages.get(stage["name"]) or {}, run["events"]))
    if workload.get("method"):
        parts.append(_pairs("method", "the method's settings", workload["method"], open_=True))
    parts.append(
        tag(
            "details",
            {"class": "workload"},
            tag("summary", None, "the workload as nodus resolved it (every default explicit)"),
            tag("pre", {"class": "workload"}, json.dumps(workload, indent=2, sort_keys=True)),
        )
    )
    return join(parts)


def _stage(stage: dict[str, Any], resolved: dict[str, Any], events: list[dict[str, Any]]) -> Markup:
    command = [str(word) for word in resolved.get("command") or []]
    launch = stage.get("launch") or {}
    python = launch.get("python")
    facts: list[tuple[str, Any]] = [
        ("command", shlex.join(command) if command else "–"),
        ("runs", launch.get("executable") or "–"),
        ("interpreter", f"Python {python.split()[0]}" if python else "not a Python"),
        ("code", resolved.get("code") or "–"),
    ]
    trained = _newest_arguments(stage["name"], events)
    if trained is None and command:
        arguments = program_arguments(command, python is not None)
        facts.append(("arguments", shlex.join(arguments) if arguments else "none"))
    method = (resolved.get("env") or {}).get(protocol.ENV_METHOD)
    items = [join([tag("dt", None, key), tag("dd", None, value)]) for key, value in facts]
    parts = [
        tag("h3", None, f"stage {stage['name']}"),
        tag("dl", {"class": "facts ran", "data_stage": stage["name"]}, *items),
    ]
    if trained is not None:
        parts.append(_trainer_arguments(*trained))
    if method:
        parts.append(_pairs("method", "the method's settings", _json(method), open_=True))
    return join(parts)


def _newest_arguments(
    stage: str, events: list[dict[str, Any]]
) -> tuple[int | None, dict[str, Any]] | None:
    for event in reversed(events):
        if event["type"] == protocol.EVENT_TRAINING_ARGUMENTS and event["stage"] == stage:
            return event["attempt"], dict(event.get("arguments") or {})
    return None


def _trainer_arguments(attempt: int | None, arguments: dict[str, Any]) -> Markup:
    first = {name: arguments[name] for name in HYPERPARAMETERS if name in arguments}
    return join(
        [
            _pairs(
                "trainer",
                f"the Trainer's arguments (attempt {attempt})",
                first,
                open_=True,
            ),
            _pairs("trainer-all", f"all {len(arguments)} arguments", arguments, open_=False),
        ]
    )


def _pairs(name: str, title: str, values: dict[str, Any], open_: bool) -> Markup:
    rows = [
        tag(
            "tr",
            {"class": "argument"},
            tag("td", None, key),
            tag("td", {"class": "value"}, _value(values[key])),
        )
        for key in (values if name == "trainer" else sorted(values))
    ]
    return tag(
        "details",
        {"class": f"arguments {name}", "open": open_},
        tag("summary", None, title),
        tag("table", {"class": "arguments"}, tag("tbody", None, *rows)),
    )


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _json(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        return {protocol.ENV_METHOD: text}
    return found if isinstance(found, dict) else {protocol.ENV_METHOD: text}


def usage_section(run: dict[str, Any], usage: list[dict[str, Any]]) -> Markup:
    """The running attempts' use now; nothing once no attempt runs."""
    running = [(s, a) for s in run["stages"] for a in s["attempts"] if a["outcome"] is None]
    if not running:
        return Markup()
    heading = tag("h2", None, "Resource use now")
    if not usage:
        hosts = ", ".join(sorted({a["host"] or "?" for _, a in running}))
        return join(
            [
                heading,
                tag(
                    "p",
                    {"class": "empty usage"},
                    f"not readable here: the running attempt's program is on {hosts}, or has "
                    "not started yet",
                ),
            ]
        )
    rows = [_usage_row(use) for use in usage]
    header = ("stage", "attempt", "pid", "processes", "CPU", "memory", "GPUs")
    return join(
        [
            heading,
            tag(
                "table",
                {"class": "usage"},
                tag("thead", None, tag("tr", None, *[tag("th", None, h) for h in header])),
                tag("tbody", None, *rows),
            ),
        ]
    )


def _usage_row(use: dict[str, Any]) -> Markup:
    percent, over = use["cpu_percent"], use["cpu_seconds_over"]
    cpu = "–" if percent is None else f"{percent:.0f}% of a core over {over:.1f} s"
    return tag(
        "tr",
        {"class": "usage"},
        tag("td", None, use["stage"]),
        tag("td", {"class": "num"}, use["attempt"]),
        tag("td", {"class": "num"}, use["pid"]),
        tag("td", {"class": "num"}, use["processes"]),
        tag("td", {"class": "cpu"}, cpu),
        tag("td", {"class": "memory"}, human_bytes(use["memory_bytes"])),
        tag("td", {"class": "gpus"}, gpu_text(use["gpus"])),
    )


def gpu_text(gpus: list[dict[str, Any]] | None) -> str:
    """``GPU 0 NVIDIA H100: 87% busy, 40.0 GiB of 80.0 GiB``, one per GPU; ``none seen`` where
    ``nvidia-smi`` is absent or sees none."""
    if not gpus:
        return "none seen"
    said = []
    for gpu in gpus:
        busy = "–" if gpu["utilization"] is None else f"{gpu['utilization']:.0f}% busy"
        used, total = gpu["memory_used"], gpu["memory_total"]
        memory = (
            f"{human_bytes(used)} of {human_bytes(total)}"
            if used is not None and total is not None
            else "memory –"
        )
        said.append(f"GPU {gpu['index']} {gpu['name']}: {busy}, {memory}")
    return "; ".join(said)
