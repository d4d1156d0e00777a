"""The runner ↔ program protocol: every name and format that passes between the two sides.

The runner (``nodus.runner``) and a program's integration (``nodus.stages.hf`` inside the user's
process, or any program that speaks the protocol) meet only here. Both import this module; no
file name, folder name, variable name or record key of the protocol is written anywhere else.
docs/internals.md ("Runner ↔ stage program") describes the same contract in prose.

The working copy of an attempt, as the program sees it::

    <copy>/state/                  $NODUS_CHECKPOINT_DIR: checkpoint-<step>/ folders
    <copy>/.nodus/                 $NODUS_CONTROL_DIR, never captured:
        integration.json           Settings, written by the runner before the program starts
        requests/<n>.json          SaveRequest, written by the runner
        saves/<step>.json          SaveRecord, written by the integration after a publish
        committed.json             CommitRecord, written by the runner after each commit
        runtime.json               RuntimeSettings, written by the runner while the program runs
        events/<n>.json            EventRecord, written by the program for the run's event log
        progress.json              Progress, rewritten by the integration while it trains
        tmp/                       where the integration builds a checkpoint before the rename

Every file is written atomically (temp file, fsync, rename: ``nodus._atomic``) because the other
side reads it while it may be replaced. This module imports nothing but the standard library:
the bootstrap imports it at the start of every Python process of an integration stage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

# Not `typing`'s (see nodus/__init__.py): annotations are strings here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import xxhash

# --- the working copy --------------------------------------------------------------------------

STATE_DIR = "state"
"""The dedicated state folder: ``NODUS_CHECKPOINT_DIR`` is ``<copy>/state`` whatever is selected."""

CONTROL_DIR = ".nodus"
"""Runner-private control folder of each working copy; never selectable, never captured."""

# --- environment -------------------------------------------------------------------------------

ENV_CHECKPOINT_DIR = "NODUS_CHECKPOINT_DIR"
ENV_CONTROL_DIR = "NODUS_CONTROL_DIR"
ENV_RUN_ID = "NODUS_RUN_ID"
ENV_STAGE = "NODUS_STAGE"
ENV_ATTEMPT = "NODUS_ATTEMPT"
ENV_TMPDIR = "TMPDIR"
ENV_ATTEMPT_TOKEN = "NODUS_ATTEMPT_TOKEN"
"""``<run>/<stage>/<attempt>``, in every process of an attempt's tree (inherited): how the runner
finds what an attempt left behind. Programs never need to read it."""
ENV_RESTORED_STEP = "NODUS_RESTORED_STEP"
ENV_RESTORED_CHECKPOINT = "NODUS_RESTORED_CHECKPOINT"
"""On an attempt that restored one of the run's snapshots: its step and the path of its
checkpoint in the working copy (see :data:`RESUME_ARG_FIELDS`); absent on a fresh start."""
RUNTIME_DIR = "runtime"
"""``$TMPDIR/runtime`` exists: rebuildable installs go there, outside the selection."""

CACHE_VARIABLES = {
    "HF_HOME": "hf",
    "HF_DATASETS_CACHE": os.path.join("hf", "datasets"),  # an inherited one would win over HF_HOME
    "XDG_CACHE_HOME": "xdg",
    "PIP_CACHE_DIR": "pip",
}
"""Caches the runner points at private folders: variable → folder in the stage's cache, which
every attempt of the stage shares (a later attempt reuses the tokenized data of an earlier one)."""

ENV_WARM_START = "NODUS_WARM_START"
"""``1`` on an attempt that starts from another run's weights (``nodus runs branch --from
weights``): the checkpoint folder laid out in ``$NODUS_CHECKPOINT_DIR`` holds weights (and the
program's own files) to load, never state to resume; training starts at step 0 with fresh
optimizer state."""

ENV_WRITE_DELAY = "NODUS_HF_WRITE_DELAY_S"
"""Fault injection for qualification and tests: seconds the integration waits before it publishes
a checkpoint, so a kill can land in the middle of a save. Never set in normal use."""

# --- managed methods (framework shortcuts) -----------------------------------------------------

ENV_METHOD = "NODUS_METHOD"
"""The resolved ``[method]`` settings of a framework shortcut, as JSON, in the environment of
the stages it generates (``nodus.schemas.methods`` writes it, ``nodus.stages.methods`` reads it;
the keys are those of ``ResolvedWorkload.method``)."""
METHOD_TRAIN_PROGRAM = "nodus.stages.methods.train"
METHOD_EXPORT_PROGRAM = "nodus.stages.methods.export"
"""The modules the generated ``train`` and ``export`` stages run with ``python -m``."""
METHOD_TRAINED_DIR = "trained"
"""The train stage's output: the final weights (adapter or full) and tokenizer, which the export
stage finds laid over its own copy."""


def program_environment(
    *, state: str, control: str, tmp: str, cache: str, run_id: str, stage: str, attempt: int
) -> dict[str, str]:
    """The variables the runner gives a program (over its own environment and the stage's)."""
    env = {
        ENV_CHECKPOINT_DIR: state,
        ENV_CONTROL_DIR: control,
        ENV_RUN_ID: run_id,
        ENV_STAGE: stage,
        ENV_ATTEMPT: str(attempt),
        ENV_TMPDIR: tmp,
    }
    env.update({name: os.path.join(cache, folder) for name, folder in CACHE_VARIABLES.items()})
    return env


# --- step folders ------------------------------------------------------------------------------

_CHECKPOINT_PREFIX = "checkpoint-"


def checkpoint_folder(step: int) -> str:
    """The name of a step's checkpoint folder (the Trainer's own naming)."""
    return f"{_CHECKPOINT_PREFIX}{step}"


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint folder name; None for any other name."""
    number = name[len(_CHECKPOINT_PREFIX) :]
    if name.startswith(_CHECKPOINT_PREFIX) and number.isdigit() and number.isascii():
        return int(number)
    return None


def checkpoint_steps(state_dir: str) -> list[int]:
    """Steps of the checkpoint folders in ``state_dir`` now, ascending."""
    return checkpoint_listing(state_dir)[0]


def checkpoint_listing(state_dir: str) -> tuple[list[int], list[str]]:
    """The steps of the checkpoint folders in ``state_dir`` now (ascending) and the names of
    everything else in it (sorted); both empty when it cannot be listed.

    One listing, its entries' types read with it (no ``stat`` of each: a program that keeps
    every checkpoint folder has thousands)."""
    steps, others = [], []
    skip = len(_CHECKPOINT_PREFIX)
    try:
        with os.scandir(state_dir) as entries:
            for entry in entries:  # checkpoint_step's test, inline: thousands of names
                name = entry.name
                number = name[skip:] if name.startswith(_CHECKPOINT_PREFIX) else ""
                if number.isdigit() and number.isascii() and _is_folder(entry):
                    steps.append(int(number))
                else:
                    others.append(name)
    except OSError:
        return [], []
    return sorted(steps), sorted(others)


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # through a symlink, as os.path.isdir
    except OSError:
        return False


PLACEHOLDER = r"\{(\w*)\}"
"""A placeholder of ``checkpoint_name`` and ``resume_args``: ``{name}``."""


def placeholders(text: str) -> list[str]:
    """The names of the placeholders in ``text``, in order."""
    import re

    return re.findall(PLACEHOLDER, text)


STEP_NAME_FIELDS = ("step", "epoch")
"""The placeholders of ``[continuity] checkpoint_name`` (``"model_{step}.pt"``): the step,
which the name must hold once, and an epoch, recorded as the snapshot's epoch."""


def checked_step_name(template: str) -> str:
    """``checkpoint_name`` as given, or ValueError saying what is wrong with it."""
    if "/" in template:
        raise ValueError("names one file or folder: no '/' (it is matched at any depth)")
    names = placeholders(template)
    if names.count("step") != 1:
        raise ValueError("must hold {step} exactly once, e.g. 'step_{step}' or 'model-{step}.pt'")
    unknown = sorted(set(names) - set(STEP_NAME_FIELDS))
    if unknown:
        raise ValueError(f"knows only {{step}} and {{epoch}}, not {{{unknown[0]}}}")
    return template


RESUME_ARG_FIELDS = ("checkpoint", "step")
"""The placeholders of ``[continuity] resume_args``: the restored checkpoint's path in the
working copy (the folder or file whose name carries its step, a ``checkpoint-<step>`` folder, or
the one selected path) and its step."""


def checked_resume_arg(argument: str) -> str:
    """One ``resume_args`` entry as given, or ValueError naming an unknown placeholder."""
    unknown = sorted(set(placeholders(argument)) - set(RESUME_ARG_FIELDS))
    if unknown:
        raise ValueError(f"knows only {{checkpoint}} and {{step}}, not {{{unknown[0]}}}")
    return argument


def resume_arguments(arguments: tuple[str, ...], checkpoint: str, step: int | None) -> list[str]:
    """``resume_args`` with their placeholders filled in for one restored attempt."""
    step_text = "" if step is None else str(step)
    return [a.replace("{checkpoint}", checkpoint).replace("{step}", step_text) for a in arguments]


def building_folder(step: int, token: int) -> str:
    """A checkpoint being built under ``tmp/`` (``token``: the writing process's pid)."""
    return f"{checkpoint_folder(step)}.{token}"


def building_step(name: str) -> int | None:
    """The step of a folder :func:`building_folder` named; None for any other name."""
    head, dot, token = name.partition(".")
    return checkpoint_step(head) if dot and token.isdigit() else None


# --- the control folder ------------------------------------------------------------------------

SETTINGS_FILE = "integration.json"
REQUESTS_DIR = "requests"
SAVES_DIR = "saves"
COMMITTED_FILE = "committed.json"
RUNTIME_FILE = "runtime.json"
EVENTS_DIR = "events"
PROGRESS_FILE = "progress.json"
BUILD_DIR = "tmp"
_RECORD_SUFFIX = ".json"


@dataclass(frozen=True)
class ControlPaths:
    """Where each file of the protocol lives inside one control folder."""

    root: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ControlPaths | None:
        """The control folder of the attempt this process belongs to; None outside nodus."""
        root = environ.get(ENV_CONTROL_DIR)
        return cls(root) if root else None

    @property
    def settings(self) -> str:
        return os.path.join(self.root, SETTINGS_FILE)

    @property
    def requests(self) -> str:
        return os.path.join(self.root, REQUESTS_DIR)

    @property
    def saves(self) -> str:
        return os.path.join(self.root, SAVES_DIR)

    @property
    def events(self) -> str:
        return os.path.join(self.root, EVENTS_DIR)

    @property
    def committed(self) -> str:
        return os.path.join(self.root, COMMITTED_FILE)

    @property
    def runtime(self) -> str:
        return os.path.join(self.root, RUNTIME_FILE)

    @property
    def progress(self) -> str:
        return os.path.join(self.root, PROGRESS_FILE)

    @property
    def build(self) -> str:
        return os.path.join(self.root, BUILD_DIR)

    def request(self, request_id: int) -> str:
        return os.path.join(self.requests, record_name(request_id))

    def save_record(self, step: int) -> str:
        return os.path.join(self.saves, record_name(step))

    def event(self, number: int) -> str:
        return os.path.join(self.events, record_name(number))

    def runner_folders(self) -> tuple[str, ...]:
        """The folders the runner creates before the program starts."""
        return (self.requests, self.saves, self.events)


def record_name(number: int) -> str:
    """``<n>.json``: requests by id, save records by step, events by time."""
    return f"{number}{_RECORD_SUFFIX}"


def numbered_records(folder: str) -> list[tuple[int, str]]:
    """(number, path) of the ``<n>.json`` files in ``folder``, ascending; temp files skipped."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        stem = name[: -len(_RECORD_SUFFIX)]
        if name.endswith(_RECORD_SUFFIX) and stem.isdigit() and stem.isascii():
            found.append((int(stem), os.path.join(folder, name)))
    return sorted(found)


# --- content hashes ---------------------------------------------------------------------------

CONTENT_HASH = "xxh3-128"
"""The one content hash of nodus: a store names each blob by its 32 hex digits, and a
fingerprint written as text reads ``xxh3-128:<hex>`` (:data:`CONTENT_PREFIX`)."""
CONTENT_PREFIX = f"{CONTENT_HASH}:"
"""How a content fingerprint starts: a method's dataset and base model (recorded by the runner
when a run is accepted) and a Trainer's dataset rows (recorded by the integration with each
checkpoint, compared when one is restored)."""


def content_hasher() -> xxhash.xxh3_128:
    """A fresh :data:`CONTENT_HASH` hasher (``update``, ``hexdigest``); every hash of contents
    nodus takes starts here.

    ``xxhash`` is imported on the first call, not with this module: the bootstrap imports this
    module into every process of an integration stage, and most of them never hash.
    """
    import xxhash

    return xxhash.xxh3_128()


# --- lineage ----------------------------------------------------------------------------------

FULL_STATE = "full-state"
"""A run that continues another run's training state (``resume_from``, ``runs branch --from
full-state``): the parent's snapshot is restored as a resume would restore it."""
MODE_WEIGHTS = "weights"
"""A run that starts from another run's weights with fresh optimizer state, at step 0. Spelled
like the artifact kind ``nodus.store.kinds.KIND_WEIGHTS`` because it is what such a run takes
from its parent, but a different word: a continuation mode, never a kind of file."""
CONTINUATION_MODES = (FULL_STATE, MODE_WEIGHTS)


# --- integration.json --------------------------------------------------------------------------

INTEGRATION_AUTO = "auto"
INTEGRATION_HF_TRAINER_V1 = "hf-trainer-v1"
INTEGRATIONS = (INTEGRATION_AUTO, INTEGRATION_HF_TRAINER_V1)
"""Stage integrations that get a control folder with settings and the bootstrap."""

SAVE_EVERY_AUTO = "auto"
"""``save_every = "auto"``: the integration picks its cadence, within ``max_save_overhead``."""


@dataclass(frozen=True)
class NodePlace:
    """Where a cluster attempt's node attempt runs: node ``rank`` of ``nodes`` (node 0 holds
    the rendezvous and captures for the stage)."""

    rank: int
    nodes: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodePlace:
        return cls(rank=int(data["rank"]), nodes=int(data["nodes"]))


@dataclass(frozen=True)
class Settings:
    """``integration.json``: what the runner asks of one attempt's program."""

    integration: str
    """``auto`` runs a program outside the profile unprepared; ``hf-trainer-v1`` refuses it."""
    save_every: int | str
    """Optimizer steps between saves; 0 = only at the end and when the runner asks;
    :data:`SAVE_EVERY_AUTO`: the integration measures its saves and picks the steps itself."""
    save_each_epoch: bool
    restored_step: int | None
    """The program resumes from ``state/checkpoint-<restored_step>``; None = from the source."""
    run_id: str = ""
    stage: str = ""
    attempt: int = 0
    home: str = ""
    """``$NODUS_HOME`` of the runner: where environments this machine qualified are recorded."""
    qualifying: bool = False
    """Lifts the qualification check only. Never from a workload file: only ``nodus qualify``
    sets it, because it runs in an environment that is by definition not yet qualified."""
    parent_mode: str | None = None
    """``full-state`` or ``weights`` when this attempt starts from another run's snapshot (the
    run's parent); None when it starts from the source or from a snapshot of its own run."""
    warm_start_step: int | None = None
    """``weights`` only: ``state/checkpoint-<warm_start_step>`` holds the weights to load into
    the model before training starts at step 0 (``restored_step`` is None then)."""
    max_save_overhead: float | None = None
    """With ``save_every = "auto"``: the share of training time the saves may cost (stall plus
    the slowdown of steps while a save is written); None otherwise."""
    node: NodePlace | None = None
    """The node of a multi-node stage this attempt runs on (a cluster backend's node attempt,
    docs/cluster.md); None on one machine. Only the runner writes it: a world of processes
    spread over machines is admitted there alone (:mod:`nodus.stages.hf.inprocess.profile`)."""

    @property
    def auto_cadence(self) -> bool:
        return self.save_every == SAVE_EVERY_AUTO

    @property
    def explicit(self) -> bool:
        """Explicit ``hf-trainer-v1`` refuses what ``auto`` would run unprepared."""
        return self.integration == INTEGRATION_HF_TRAINER_V1

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "integration": self.integration,
            "save_every": self.save_every,
            "save_each_epoch": self.save_each_epoch,
            "restored_step": self.restored_step,
            "run_id": self.run_id,
            "stage": self.stage,
            "attempt": self.attempt,
            "home": self.home,
        }
        if self.qualifying:  # optional: absent means false
            data["qualifying"] = True
        if self.parent_mode is not None:  # optional: absent means none
            data["parent_mode"] = self.parent_mode
            data["warm_start_step"] = self.warm_start_step
        if self.auto_cadence:  # present only with save_every = "auto"
            data["max_save_overhead"] = self.max_save_overhead
        if self.node is not None:  # optional: absent on one machine
            data["node"] = {"rank": self.node.rank, "nodes": self.node.nodes}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        restored = data.get("restored_step")
        warm = data.get("warm_start_step")
        every = data.get("save_every")
        overhead = data.get("max_save_overhead")
        return cls(
            integration=str(data.get("integration", INTEGRATION_AUTO)),
            save_every=SAVE_EVERY_AUTO if every == SAVE_EVERY_AUTO else int(every or 0),
            save_each_epoch=bool(data.get("save_each_epoch", False)),
            restored_step=None if restored is None else int(restored),
            run_id=str(data.get("run_id", "")),
            stage=str(data.get("stage", "")),
            attempt=int(data.get("attempt") or 0),
            home=str(data.get("home", "")),
            qualifying=bool(data.get("qualifying", False)),
            parent_mode=data.get("parent_mode"),
            warm_start_step=None if warm is None else int(warm),
            max_save_overhead=None if overhead is None else float(overhead),
            node=NodePlace.from_dict(data["node"]) if data.get("node") else None,
        )


# --- requests/<n>.json -------------------------------------------------------------------------

THEN_CONTINUE = "continue"
THEN_STOP = "stop"
"""After answering a ``stop`` request the program blocks; the runner captures and ends it."""


@dataclass(frozen=True)
class SaveRequest:
    """The runner asks for a save at the next optimizer boundary."""

    id: int
    then: str = THEN_CONTINUE

    @property
    def stops(self) -> bool:
        return self.then == THEN_STOP

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "then": self.then}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], number: int) -> SaveRequest:
        """``number``: the file's own number, for a request that does not name its id."""
        return cls(id=int(data.get("id", number)), then=str(data.get("then", THEN_CONTINUE)))


# --- saves/<step>.json -------------------------------------------------------------------------


@dataclass(frozen=True)
class SaveRecord:
    """Written once ``state/checkpoint-<step>`` is published and every file in it is durable."""

    step: int
    epoch: float | None
    requests: tuple[int, ...] = ()
    """The requests this save answers; a later request at the same step is added by rewriting."""
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint(self) -> str:
        return checkpoint_folder(self.step)

    def answering(self, request_ids: list[int]) -> SaveRecord:
        """The same save, answering ``request_ids`` too."""
        ids = tuple(sorted({*self.requests, *request_ids}))
        return SaveRecord(self.step, self.epoch, ids, self.metrics)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "checkpoint": self.checkpoint,
            "requests": list(self.requests),
            "metrics": self.metrics,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SaveRecord:
        epoch = data.get("epoch")
        return cls(
            step=int(data["step"]),
            epoch=None if epoch is None else float(epoch),
            requests=tuple(int(r) for r in data.get("requests") or ()),
            metrics=dict(data.get("metrics") or {}),
        )


# --- progress.json -----------------------------------------------------------------------------

PROGRESS_EVERY_S = 1.0
"""An integration rewrites progress.json at most this often (and once more when training ends):
``runs get`` of a running run reads it, so it is never more than about this stale."""


@dataclass(frozen=True)
class Progress:
    """Where the program's training stands: ``runs get``'s view of a running attempt."""

    step: int
    max_steps: int | None
    """The step training ends at, where the program knows it."""
    loss: float | None
    """The last training loss the program logged."""
    steps_per_second: float | None
    """Optimizer steps per second since this process's first step (None before a second one)."""
    at: float
    """When it was written (``time.time()``)."""
    ended: bool = False
    """Written when training ended (the Trainer's ``on_train_end``; the final save follows it):
    a program that hangs after that save is committed has finished its stage (``hang_timeout``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "max_steps": self.max_steps,
            "loss": self.loss,
            "steps_per_second": self.steps_per_second,
            "at": self.at,
            "ended": self.ended,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        def number(key: str) -> float | None:
            value = data.get(key)
            return None if value is None else float(value)

        max_steps = data.get("max_steps")
        return cls(
            step=int(data["step"]),
            max_steps=None if max_steps is None else int(max_steps),
            loss=number("loss"),
            steps_per_second=number("steps_per_second"),
            at=float(data["at"]),
            ended=bool(data.get("ended", False)),
        )


# --- committed.json ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitRecord:
    """The newest committed snapshot; the integration removes checkpoints older than its step,
    and ``save_every = "auto"`` measures a save until its step is committed."""

    step: int
    snapshot: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "snapshot": self.snapshot}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitRecord:
        return cls(step=int(data["step"]), snapshot=str(data["snapshot"]))


# --- runtime.json ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeSettings:
    """What the runner changes while the program runs; the integration reads it at each step end.

    Absent means every default: the settings of ``integration.json`` hold as they were.
    """

    periodic_saves: bool = True
    """False: no saves at ``save_every`` or epoch ends (the disk guard turned them off); the
    final save and saves the runner requests (pause, preemption notice) still happen."""
    reason: str = ""
    """Why, in words, for the program's log."""

    def to_dict(self) -> dict[str, Any]:
        return {"periodic_saves": self.periodic_saves, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuntimeSettings:
        return cls(
            periodic_saves=bool(data.get("periodic_saves", True)),
            reason=str(data.get("reason", "")),
        )


# --- events/<n>.json ---------------------------------------------------------------------------

EVENT_UNPREPARED = "integration_unprepared"
"""``auto`` runs the program unprepared: the runner watches checkpoint folders instead."""
EVENT_REFUSED = "integration_refused"
EVENT_SAVE_FAILED = "checkpoint_save_failed"
EVENT_WARM_START = "warm_start"
"""The integration loaded another run's weights: ``{"checkpoint", "weights"}`` (their hash)."""
EVENT_CHECKPOINT_ALIGNED = "checkpoint_every_aligned"
"""grpo: ``{"asked", "used"}``, a step-count checkpoint_every moved to a generation boundary."""
EVENT_SAVE_CADENCE = "save_cadence"
"""``save_every = "auto"`` chose a cadence: ``{"every", "overhead", "step"}``. From ``step`` on,
each periodic save comes ``every`` steps after the previous save; ``overhead`` is the share of
training time it is expected to cost (null for the first, measuring cadence of an attempt)."""
EVENT_RESUME_OVERRIDDEN = "resume_argument_overridden"
"""On a restored attempt the program's own ``resume_from_checkpoint`` gave way to the restored
checkpoint: ``{"given", "restored", "step"}``."""
EVENT_RESTORED_FINISHED = "restored_training_finished"
"""The restored checkpoint is at or past the end of training: ``train()`` ran no further step
and returned (``{"step", "max_steps"}``)."""
EVENT_TRAINING_ARGUMENTS = "training_arguments"
"""The Trainer's ``TrainingArguments`` as the integration sees them, once per attempt when
``train()`` starts: ``{"arguments": {name: value}}`` (values JSON can hold, others as text)."""

EVENT_DUPLICATE_SAVES = "duplicate_saves"
"""A prepared Trainer saves checkpoints of its own too, which nodus never captures: at its first
such save, ``{"setting", "turn_off", "flag", "step", "bytes", "measured", "folder"}`` (``bytes``
what that save wrote, or the model's parameter bytes when ``measured`` is false)."""
EVENT_UNNAMED = "program_event"
"""The type the runner records for an event that names none."""


@dataclass(frozen=True)
class EventRecord:
    """An event for the run's log: ``{"type": …, "details": {…}}``."""

    type: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "details": self.details}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EventRecord:
        kind = str(data.get("type", EVENT_UNNAMED))
        return cls(type=kind, details=dict(data.get("details") or {}))
