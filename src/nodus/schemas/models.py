"""The workload file as written: what a person (or the SDK) gave, omission included.

These models check each value where it is declared and keep track of what was written
(``model_fields_set``); they never apply inheritance. :mod:`nodus.schemas.resolve` turns a
:class:`Workload` into the explicit :class:`~nodus.schemas.resolved.ResolvedWorkload` a run stores.

Types are strict (TOML's ``"50"`` is not ``50``), unknown keys are refused, and every model is
frozen: a workload value cannot drift after it was checked.
"""

from __future__ import annotations

import contextvars
import re
from enum import Enum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
)

from nodus import protocol
from nodus.errors import WorkloadError
from nodus.schemas import backends, defaults
from nodus.schemas.fields import (
    Code,
    Command,
    Duration,
    Env,
    FileName,
    HangTimeout,
    Memory,
    Name,
    PathList,
    RelativePath,
    ResumeArgs,
    ResumeFrom,
    SaveEvery,
    SecretNames,
    StepKey,
    StepNameTemplate,
)
from nodus.schemas.problems import problems_from

__all__ = [
    "Continuity",
    "ContinuityMode",
    "Execution",
    "Framework",
    "Integration",
    "Method",
    "Stage",
    "Workload",
]


class ContinuityMode(str, Enum):
    """What an interrupted stage continues from."""

    CHECKPOINTED = "checkpointed"  # the newest committed snapshot
    RESTARTABLE = "restartable"  # the source alone


class Integration(str, Enum):
    """Application save/resume preparation; omitted means none."""

    AUTO = protocol.INTEGRATION_AUTO
    HF_TRAINER_V1 = protocol.INTEGRATION_HF_TRAINER_V1
    NONE = "none"  # lets a stage opt out of a selection it would inherit


class Framework(str, Enum):
    """Managed methods whose stages nodus generates (framework shortcuts)."""

    SFT = "sft"
    DPO = "dpo"
    GRPO = "grpo"


# Set while a model is being validated, so that nested models (which pydantic builds through
# their own __init__) leave error conversion to the outermost one and all problems stay together.
_VALIDATING: contextvars.ContextVar[bool] = contextvars.ContextVar("_VALIDATING", default=False)


class _Model(BaseModel):
    """Base of every workload model: strict, closed, frozen, and refusing with WorkloadError."""

    # defer_build: validators are built on first use, so `nodus validate` builds the Workload's
    # once (nested models inline) instead of every model at import; it answers in well under 0.5 s.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)

    def __init__(self, **data: Any) -> None:
        if _VALIDATING.get():
            super().__init__(**data)
            return
        token = _VALIDATING.set(True)
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise WorkloadError(problems_from(error, type(self))) from None
        finally:
            _VALIDATING.reset(token)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        """As pydantic's, but refusing with :class:`WorkloadError` listing every problem."""
        token = _VALIDATING.set(True)
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as error:
            raise WorkloadError(problems_from(error, cls)) from None
        finally:
            _VALIDATING.reset(token)

    def given(self, field: str) -> bool:
        """Whether ``field`` was written (an explicit ``None`` from Python counts as omitted)."""
        return field in self.model_fields_set and getattr(self, field) is not None


def _continuity_input(value: Any) -> Any:
    """``continuity = "restartable"`` is shorthand for ``{mode = "restartable"}``."""
    if isinstance(value, str):
        modes = [mode.value for mode in ContinuityMode]
        if value not in modes:
            raise ValueError(
                "must be 'checkpointed' or 'restartable', or a table with mode, "
                "resume_on_interruption, checkpoint_paths, checkpoint_complete, "
                "checkpoint_name, step_key, resume_args and metrics"
            )
        return {"mode": ContinuityMode(value)}
    return value


class Continuity(_Model):
    """How an interrupted stage continues, and which files make up its recovery state."""

    mode: ContinuityMode = Field(
        ContinuityMode(defaults.CONTINUITY_MODE),
        strict=False,
        description="`checkpointed` restores the newest committed snapshot; `restartable` "
        "starts again from the source.",
    )
    resume_on_interruption: bool | None = Field(
        None,
        description="Recover automatically after an interruption; default true for "
        "`checkpointed`, false for `restartable`.",
    )
    checkpoint_paths: PathList | None = Field(
        None,
        description="Literal paths in the code folder that make up a snapshot; omitted or "
        'empty means ["state"]; ["."] is the whole folder.',
    )
    checkpoint_complete: FileName | None = Field(
        None,
        description="A file the program writes last into each checkpoint folder: a folder "
        "is captured only once it is there (directory contract; omitted = known layouts by "
        "their own last file, others once settled).",
    )
    checkpoint_name: StepNameTemplate | None = Field(
        None,
        description="The name pattern that carries the step in a selection without step "
        "folders of the protocol's naming, e.g. 'model_{step}.pt' (directory contract; omitted "
        "= the known names such as step_N, checkpoint_N, epoch=E-step=S, else the capture's "
        "sequence).",
    )
    step_key: StepKey | None = Field(
        None,
        description="The top-level key of a torch.save checkpoint that holds the program's "
        "step, where the names carry none (directory contract; omitted = global_step, "
        "iter_num, step or iteration, else the capture's count).",
    )
    resume_args: ResumeArgs | None = Field(
        None,
        description="Arguments added to the command of an attempt that restored a snapshot, "
        "with {checkpoint} (its path in the working copy) and {step}, e.g. "
        "['--resume_from_checkpoint', '{checkpoint}'] (directory contract).",
    )
    metrics: RelativePath | None = Field(
        None,
        description="The file or folder in the code folder where the program logs its "
        "metrics: TensorBoard event files, Lightning's metrics.csv or JSON lines with a step "
        "(directory contract; omitted = runs/, lightning_logs/, metrics.jsonl and "
        "state/metrics.jsonl).",
    )


ContinuityInput = Annotated[
    Continuity | None,
    BeforeValidator(_continuity_input, json_schema_input_type=ContinuityMode | Continuity),
]


# One member per entry of the backend registry (nodus.schemas.backends), in its order.
Backend = Enum(  # type: ignore[misc]
    "Backend", [(name.upper(), name) for name in backends.NAMES], type=str
)


class Execution(_Model):
    """Save cadence, retention and recovery limits."""

    save_every: SaveEvery = Field(
        defaults.SAVE_EVERY,
        description="Optimizer steps between integration saves; 0 = only at the end and "
        'whenever nodus asks; "auto" = the most frequent cadence whose saves cost at most '
        "max_save_overhead of training time.",
    )
    max_save_overhead: float = Field(
        defaults.MAX_SAVE_OVERHEAD,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description='With save_every = "auto": the share of training time saves may cost '
        "(the stall plus the slowdown of steps while a save is written).",
    )
    save_each_epoch: bool = Field(
        defaults.SAVE_EACH_EPOCH, description="Also save at the end of every epoch (integration)."
    )
    keep_recoverable: int = Field(
        defaults.KEEP_RECOVERABLE,
        ge=0,
        description="Newest unreferenced snapshots that keep their training state.",
    )
    keep_adapters: int = Field(
        defaults.KEEP_ADAPTERS, ge=0, description="Newest snapshots that keep their weights."
    )
    max_recoveries: int = Field(
        defaults.MAX_RECOVERIES, ge=0, description="Automatic recoveries before the run fails."
    )
    grace_period: float = Field(
        defaults.GRACE_PERIOD_S,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a stopping program gets to save and exit before it is killed.",
    )
    hang_timeout: HangTimeout = Field(
        defaults.HANG_TIMEOUT,
        description="How long a program may go without progress (a line of output, a training "
        "step, a save, a write into its selection) before it is ended as hung and recovered: "
        '"auto" (5 times the longest interval its training has shown, at least 10 minutes; 30 '
        'minutes at start-up), "off", or a duration ("15m", "90s" or seconds).',
    )
    retention_days: int = Field(
        defaults.RETENTION_DAYS,
        ge=0,
        description="Days a finished run's snapshots are kept before `nodus gc` expires them.",
    )
    max_source_bytes: int = Field(
        defaults.MAX_SOURCE_BYTES,
        gt=0,
        description="Largest source (the code folder less its excludes) a run accepts; a larger "
        "one is refused before anything is copied. Stages sharing a code folder share its "
        "source: the largest value among them applies.",
    )
    unrecorded_retry: Duration = Field(
        defaults.UNRECORDED_RETRY_S,
        description="With a remote store: how long a stage that ended with saves not yet "
        'uploaded keeps retrying them ("15m", "90s" or seconds) before it finishes and lists '
        "them as unrecorded. Refused with a local store, where nothing is uploaded.",
    )
    backend: Backend = Field(
        Backend(backends.DEFAULT),
        strict=False,
        description="Where the stage's attempts run: "
        + "; ".join(f'"{e.name}" ({e.where})' for e in backends.REGISTRY.values())
        + ". On a cluster the store must be one every node reaches (docs/cluster.md).",
    )
    cpus: float = Field(
        defaults.RAY_CPUS,
        gt=0,
        allow_inf_nan=False,
        description='CPUs reserved for each process of the stage (backend = "ray"; '
        '"slurm": --cpus-per-task, a whole number).',
    )
    memory: Memory = Field(
        defaults.RAY_MEMORY,
        description="Memory reserved for each process of the stage, in bytes or with a unit "
        '("16GiB") (backend = "ray"; "slurm": --mem); 0: none reserved.',
    )
    gpu_count: int = Field(
        defaults.RAY_GPU_COUNT,
        ge=0,
        description='GPUs reserved for each process of the stage (backend = "ray"; "slurm": '
        "--gpus-per-node).",
    )
    nodes: int = Field(
        defaults.NODES,
        ge=1,
        description="Processes of the stage, one per node, with the torch.distributed rendezvous "
        'environment (backend = "ray" or "slurm"); only node 0 captures snapshots.',
    )
    shared_store: bool = Field(
        False,
        description="Declares that the run's file:// store is on a filesystem every cluster node "
        'mounts at the same path (backend = "ray" or "slurm"); without it a file:// store is '
        "node-local and refused.",
    )
    partition: str | None = Field(
        None, min_length=1, description='The Slurm partition the jobs run in (backend = "slurm").'
    )
    account: str | None = Field(
        None, min_length=1, description='The Slurm account charged (backend = "slurm").'
    )
    qos: str | None = Field(
        None, min_length=1, description='The Slurm quality of service (backend = "slurm").'
    )
    time_limit: Duration | None = Field(
        None,
        description='Each job\'s time limit ("4h", "90m" or seconds; backend = "slurm"): '
        "at its end the run continues in a new job from the snapshot saved at the signal.",
    )
    signal_lead: Duration = Field(
        defaults.SLURM_SIGNAL_LEAD_S,
        description="How long before a job's end Slurm signals it (sbatch --signal), for the "
        'program to save and commit ("5m", "90s" or seconds; backend = "slurm").',
    )
    sbatch_options: list[str] = Field(
        [],
        description='More sbatch options, each a word as sbatch takes it (["--exclusive"]; '
        'backend = "slurm"); checked with sbatch --test-only before the run is accepted.',
    )


_REWARD_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def _check_reward_function(value: str) -> str:
    if not _REWARD_FUNCTION.fullmatch(value):
        raise ValueError("reward functions are named 'module:function'")
    return value


RewardFunction = Annotated[str, AfterValidator(_check_reward_function)]


class Method(_Model):
    """Settings of a framework shortcut (`framework = "sft" | "dpo" | "grpo"`); docs/methods.md
    gives each key's default and its TRL counterpart."""

    base_model: str = Field(
        min_length=1, description="Local folder of the model and tokenizer to train."
    )
    dataset: str = Field(
        min_length=1,
        description="Local JSONL or Parquet file, or a saved dataset folder; its fingerprint is "
        "recorded with the run.",
    )
    max_steps: int | None = Field(None, gt=0, description="Training length in optimizer steps.")
    num_epochs: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Training length in epochs."
    )
    learning_rate: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Peak learning rate; omitted = TRL's."
    )
    batch_size: int = Field(
        defaults.METHOD_BATCH_SIZE, gt=0, description="Examples per micro-batch."
    )
    gradient_accumulation_steps: int = Field(
        defaults.METHOD_GRADIENT_ACCUMULATION_STEPS,
        gt=0,
        description="Micro-batches per optimizer step.",
    )
    max_length: int | None = Field(
        None, gt=0, description="Tokens per example; for grpo the completion length."
    )
    seed: int = Field(defaults.METHOD_SEED, ge=0, description="Seed of weights, order, sampling.")
    lora_rank: int | None = Field(None, gt=0, description="LoRA rank; omitted = full weights.")
    lora_alpha: float | None = Field(None, gt=0, allow_inf_nan=False)
    lora_dropout: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False)
    lora_target_modules: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, min_length=1, description="Modules LoRA adapts; omitted = PEFT's for the model."
    )
    load_in_4bit: bool = False
    gpu_count: int = Field(1, ge=1)
    checkpoint_every: int | None = Field(
        None, ge=0, description="Steps between saves; for grpo aligned to a generation boundary."
    )
    checkpoint_keep: int | None = Field(
        None, ge=0, description="Newest snapshots that keep their state and weights."
    )
    reward_functions: list[RewardFunction] | None = Field(
        None, description="grpo only: reward functions as 'module:function'."
    )
    num_generations: int | None = Field(
        None, ge=2, description="grpo only: completions sampled per prompt."
    )
    kl_beta: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="grpo only: KL penalty coefficient."
    )


class _StageFields(_Model):
    """Fields a stage may set, and the workload may set for every stage."""

    code: Code = Field(defaults.CODE, description="Source folder, relative to the workload file.")
    command: Command | None = Field(
        None, description="The program to run: a list, or a string split like a shell would."
    )
    integration: Integration | None = Field(
        None,
        strict=False,
        description="`auto` or `hf-trainer-v1` prepares a Trainer program; omitted = none; "
        "`none` opts a stage out of the workload's selection.",
    )
    outputs: PathList | None = Field(
        None, description="Final result files in the code folder, kept with the run for good."
    )
    env: Env | None = Field(
        None,
        description="Extra environment variables (strings); a stage's are added to the workload's.",
    )
    secrets: SecretNames | None = Field(
        None,
        description="Names of variables whose values each attempt takes from the environment of "
        "whoever drives it and gives the program; never stored. A stage's are added to the "
        "workload's.",
    )
    continuity: ContinuityInput = Field(
        None,
        description="A mode string, or a table with mode, resume_on_interruption, "
        "checkpoint_paths, checkpoint_complete, checkpoint_name, step_key, resume_args and "
        "metrics.",
    )
    execution: Execution | None = Field(
        None, description="Save cadence, retention and recovery limits."
    )


class Stage(_StageFields):
    """One supervised program of a workload; omitted fields are inherited from the workload."""

    name: Name = Field(description="Unique within the workload.")


class Workload(_StageFields):
    """A workload file. Without `[[stages]]` the top-level fields make one stage named "main"."""

    name: Name = Field(description="The workload's name.")
    stages: list[Stage] | None = Field(
        None,
        min_length=1,
        description="The stages, run in order; a stage may override any top-level field.",
    )
    framework: Framework | None = Field(
        None,
        strict=False,
        description="A managed method whose stages nodus generates; needs a [method] table.",
    )
    method: Method | None = Field(None, description="Settings of the framework shortcut.")
    resume_from: ResumeFrom | None = Field(
        None,
        description="Start from a finished run's snapshot: RUN@STEP, RUN/STAGE@STEP or ckpt_<hex>.",
    )

    _source: str | None = PrivateAttr(None)

    @property
    def source(self) -> str | None:
        """The file this workload was loaded from (None when built in Python)."""
        return self._source

    def submission(self) -> dict[str, Any]:
        """What the SDK submits: the workload as written, omission kept.

        The continuity policy is always sent (the default table when omitted; mode and resume
        flag filled in when given), but ``checkpoint_paths`` stays exactly as written and no
        ``integration`` is sent unless one was chosen: those resolve when a run is accepted.
        """
        data = self.model_dump(mode="json", exclude_unset=True, exclude_none=True)
        data["continuity"] = _policy(self.continuity)
        if "stages" in data:
            data["stages"] = [_name_first(stage) for stage in data["stages"]]
        return _name_first(data)


def _name_first(table: dict[str, Any]) -> dict[str, Any]:
    """Dumps follow field order (inherited fields first); a person reads the name first."""
    return {"name": table.pop("name"), **table}


def _policy(continuity: Continuity | None) -> dict[str, Any]:
    mode = continuity.mode if continuity else ContinuityMode(defaults.CONTINUITY_MODE)
    table: dict[str, Any] = {"mode": mode.value}
    if continuity is not None and continuity.given("resume_on_interruption"):
        table["resume_on_interruption"] = continuity.resume_on_interruption
    else:
        table["resume_on_interruption"] = defaults.RESUME_ON_INTERRUPTION[mode.value]
    if continuity is not None and continuity.checkpoint_paths is not None:
        table["checkpoint_paths"] = list(continuity.checkpoint_paths)
    for key in _CONTRACT_KEYS:
        if continuity is not None and continuity.given(key):
            table[key] = getattr(continuity, key)
    return table


_CONTRACT_KEYS = ("checkpoint_complete", "checkpoint_name", "step_key", "resume_args", "metrics")
"""The ``[continuity]`` keys of the directory contract, kept only where written."""


class Overrides(_StageFields):
    """Values given on the command line; they win over every stage and the workload."""

    code: Code | None = None  # type: ignore[assignment]
    name: Name | None = None
    resume_from: ResumeFrom | None = None
