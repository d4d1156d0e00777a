"""The resolved workload: what a run stores when it is accepted and what the runner executes.

Everything here is explicit (no omission, no defaults left to apply), so a stored resolution
keeps meaning the same thing even if the file or nodus's defaults change later. ``to_dict`` is
the shape of ``nodus resolve --json``; ``from_dict`` reads it back from the run catalog.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from nodus.schemas import backends, defaults


@dataclass(frozen=True)
class ResolvedContinuity:
    mode: str  # "checkpointed" | "restartable"
    resume_on_interruption: bool
    checkpoint_paths: tuple[str, ...]
    checkpoint_complete: str | None = None  # file written last into each checkpoint folder
    checkpoint_name: str | None = None  # the name that carries the step ("model_{step}.pt")
    resume_args: tuple[str, ...] = ()  # added to a restored attempt's command
    metrics: str | None = None  # where the program logs its metrics, in the working copy
    step_key: str | None = None  # a checkpoint's top-level key that holds the step ("iter_num")


@dataclass(frozen=True)
class ResolvedExecution:
    save_every: int | str  # steps, or protocol.SAVE_EVERY_AUTO
    save_each_epoch: bool
    keep_recoverable: int
    keep_adapters: int
    max_recoveries: int
    grace_period: float
    retention_days: int
    max_save_overhead: float = defaults.MAX_SAVE_OVERHEAD  # with save_every "auto"; absent before
    # absent from runs accepted before the setting existed; only acceptance reads it
    max_source_bytes: int = defaults.MAX_SOURCE_BYTES
    unrecorded_retry: float = defaults.UNRECORDED_RETRY_S  # seconds; absent from older runs
    # where attempts run (absent from runs accepted before backends existed: local)
    backend: str = backends.DEFAULT
    cpus: float = defaults.RAY_CPUS
    memory: int = defaults.RAY_MEMORY  # bytes
    gpu_count: int = defaults.RAY_GPU_COUNT
    nodes: int = defaults.NODES
    shared_store: bool = False
    partition: str | None = None  # Slurm's placement (backend "slurm")
    account: str | None = None
    qos: str | None = None
    time_limit: float | None = None  # seconds
    signal_lead: float = defaults.SLURM_SIGNAL_LEAD_S
    sbatch_options: tuple[str, ...] = ()
    # "auto", "off" or seconds; runs accepted before the setting existed were never ended
    hang_timeout: float | str = defaults.HANG_TIMEOUT_OFF


@dataclass(frozen=True)
class ResolvedStage:
    name: str
    command: tuple[str, ...]
    code: str  # absolute source folder at resolution time
    env: dict[str, str]
    outputs: tuple[str, ...]
    integration: str | None  # None | "auto" | "hf-trainer-v1"
    continuity: ResolvedContinuity
    execution: ResolvedExecution
    # names of variables each attempt takes from its driver's environment (values never kept)
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolvedWorkload:
    name: str
    stages: tuple[ResolvedStage, ...]
    source: str = ""  # the workload file it came from
    resume_from: str | None = None
    framework: str | None = None
    method: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return _lists(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResolvedWorkload:
        stages = tuple(
            ResolvedStage(
                name=s["name"],
                command=tuple(s["command"]),
                code=s["code"],
                env=dict(s["env"]),
                outputs=tuple(s["outputs"]),
                integration=s["integration"],
                continuity=ResolvedContinuity(
                    mode=s["continuity"]["mode"],
                    resume_on_interruption=s["continuity"]["resume_on_interruption"],
                    checkpoint_paths=tuple(s["continuity"]["checkpoint_paths"]),
                    # absent from runs accepted before the setting existed
                    checkpoint_complete=s["continuity"].get("checkpoint_complete"),
                    checkpoint_name=s["continuity"].get("checkpoint_name"),
                    resume_args=tuple(s["continuity"].get("resume_args") or ()),
                    metrics=s["continuity"].get("metrics"),
                    step_key=s["continuity"].get("step_key"),
                ),
                execution=_execution(s["execution"]),
                secrets=tuple(s.get("secrets") or ()),  # absent from older runs
            )
            for s in data["stages"]
        )
        return cls(
            name=data["name"],
            stages=stages,
            source=data.get("source", ""),
            resume_from=data.get("resume_from"),
            framework=data.get("framework"),
            method=dict(data.get("method") or {}),
        )

    def stage(self, name: str) -> ResolvedStage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)


def _lists(value: Any) -> Any:
    """Tuples become lists so the dict is plain JSON/TOML data."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def _execution(data: dict[str, Any]) -> ResolvedExecution:
    """A stored ``[execution]``: its lists back as tuples (the dataclass stays hashable)."""
    values = dict(data)
    if "sbatch_options" in values:
        values["sbatch_options"] = tuple(values["sbatch_options"])
    return ResolvedExecution(**values)
