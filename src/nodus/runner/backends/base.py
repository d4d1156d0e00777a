"""The backend protocol: what the runner asks of a backend, and of each attempt it makes.

A backend is a module and an entry of the registry (:mod:`nodus.schemas.backends`): the entry
declares its name, the ``[execution]`` keys only it reads and the drive options it takes; the
module's ``BACKEND`` (a :class:`Backend`) checks a run before it is accepted or resumed there and
makes its attempts. The generic code (``submit``, the engine, the command line) asks the registry
and carries a drive's options (:class:`Placement`) to the backend without reading them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nodus.errors import UsageError
from nodus.runner.attempt.context import HERE, AttemptPlan, DriveState, Placement, RunContext
from nodus.schemas.backends import REGISTRY, BackendEntry, drive_options
from nodus.schemas.resolved import ResolvedStage

if TYPE_CHECKING:
    from nodus.runner.attempt.outcome import Outcome
    from nodus.runner.catalog.core import Catalog, Run


def option_values(namespace: object) -> dict[str, str | None]:
    """Every drive option's value in a parsed command line (``args``), by flag."""
    return {option.flag: getattr(namespace, option.dest, None) for option in drive_options()}


class AttemptBackend(Protocol):
    """One attempt of a stage. ``number`` (allocated when it is made) is its fencing token;
    ``run`` lays the working copy out, runs, captures and supervises the program, and says how
    it ended, with the attempt's end recorded in the catalog."""

    number: int

    def run(self) -> Outcome: ...


@dataclass(frozen=True)
class Resumed:
    """The run a resume continues, as this home's catalog knows it."""

    catalog: Catalog
    run: Run
    stage: str | None  # the stage it continues


@dataclass(frozen=True)
class Submission:
    """What a backend's acceptance checks read of a run about to be accepted or resumed: the
    stages it would run, the run's store, and this drive's placement."""

    stages: tuple[ResolvedStage, ...]
    store_url: str
    is_local: Callable[[], bool]  # whether the store is one only this machine reaches
    placement: Placement
    # what starts the run from another run's snapshot ("resume_from", "runs branch", "runs
    # resume"), or None when nothing does
    continues: str | None = None
    resumed: Resumed | None = field(default=None)


class Backend(Protocol):
    """A place a stage's attempts run: its registry entry, its acceptance checks and its
    attempts. ``check_submit`` and ``check_resume`` raise ``UsageError`` (the run is refused
    before it is accepted or driven, never accepted and then failed)."""

    @property
    def entry(self) -> BackendEntry: ...

    def check_submit(self, submission: Submission) -> None:
        """``nodus run`` and ``runs branch``: refuse what this backend cannot run."""
        ...

    def check_resume(self, submission: Submission) -> None:
        """``runs resume``: refuse what this backend cannot continue."""
        ...

    def new_attempt(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
    ) -> AttemptBackend:
        """A new attempt of ``plan.stage`` here (its number allocated in the run's catalog);
        ``state`` is the drive's, which the attempt reads and leaves its end in."""
        ...

    def attach(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        attempt: dict[str, Any],
    ) -> AttemptBackend | None:
        """The attempt a dead runner left (its catalog row, ``attempt``) if it still runs here
        on its own (a Slurm job), to supervise again instead of starting another; None where
        an attempt never outlives its runner (then it is reaped as lost)."""
        ...

    def end_left(self, attempt: dict[str, Any]) -> None:
        """End what the attempt a dead runner left still runs on its own (``runs cancel`` of
        a run without a runner); nothing where an attempt never outlives its runner."""
        ...


def backend(name: str) -> Backend:
    """The backend the registry names ``name``, its module loaded (only when asked: a Ray
    backend's module is loaded only for a run with a Ray stage)."""
    found: Backend = importlib.import_module(REGISTRY[name].runner).BACKEND
    return found


def backend_of(placement: Placement, stage: ResolvedStage) -> str:
    """The backend that runs ``stage`` in a drive: ``--backend``, else the stage's own."""
    return placement.backend or stage.execution.backend


def by_backend(
    stages: Iterable[ResolvedStage], placement: Placement
) -> dict[str, tuple[ResolvedStage, ...]]:
    """The stages each backend runs in a drive, in the registry's order."""
    stages = tuple(stages)
    grouped = {
        name: tuple(s for s in stages if backend_of(placement, s) == name) for name in REGISTRY
    }
    return {name: found for name, found in grouped.items() if found}


class EndsWithItsRunner:
    """What a backend whose attempts never outlive their runner answers for a dead runner's
    attempt: nothing to attach to, nothing to end (it is reaped as lost)."""

    def attach(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        attempt: dict[str, Any],
    ) -> AttemptBackend | None:
        return None

    def end_left(self, attempt: dict[str, Any]) -> None:
        return None


def refuse_lineage(what: str, backend: str) -> None:
    """A cluster node lays out its own run's snapshots only; starting from another run's is
    not built there yet, so it is refused rather than started from scratch."""
    raise UsageError(
        f"{what}: starting a run from another run's snapshot on the {backend} backend is not "
        'supported yet; run it with backend = "local"'
    )


_IN_PROCESS = ("memory",)  # stores that live in one process: no other node can reach them


def check_shared_store(
    stages: Iterable[ResolvedStage], store_url: str, is_local: Callable[[], bool], cluster: str
) -> None:
    """UsageError when stages that run on cluster nodes have a store only this machine reaches:
    every node lays the source out from the store and writes its snapshots there."""
    stages = list(stages)
    scheme = store_url.split("://", 1)[0] if "://" in store_url else "file"
    unshared = [s.name for s in stages if not s.execution.shared_store]
    if scheme in _IN_PROCESS or (unshared and is_local()):
        names = ", ".join(repr(name) for name in (unshared or [s.name for s in stages]))
        raise UsageError(
            f"stage {names} runs on {cluster}, but the store {store_url} is node-local: other "
            "nodes cannot lay out the source or store snapshots there. Give an object store "
            "(--store s3://…), or a file:// store on a filesystem every node mounts at the "
            "same path, declared with [execution] shared_store = true"
        )


def check_submit(
    stages: Iterable[ResolvedStage],
    placement: Placement,
    store_url: str,
    is_local: Callable[[], bool],
    continues: str | None = None,
) -> None:
    """Each backend's checks of the stages it would run, before a run is accepted."""
    for name, its in by_backend(stages, placement).items():
        backend(name).check_submit(Submission(its, store_url, is_local, placement, continues))


def check_resume(
    stages: Iterable[ResolvedStage],
    placement: Placement,
    store_url: str,
    is_local: Callable[[], bool],
    continues: str | None,
    resumed: Resumed,
) -> None:
    """Each backend's checks of the stages it would run, before a run is resumed."""
    for name, its in by_backend(stages, placement).items():
        submission = Submission(its, store_url, is_local, placement, continues, resumed)
        backend(name).check_resume(submission)


def _left_job(attempt: dict[str, Any]) -> str | None:
    """The backend whose job a dead runner's attempt ran as (its row's ``job``), if any."""
    job = attempt.get("job")
    if attempt["outcome"] is not None or not job:
        return None
    scheduler: str = job["scheduler"]
    return scheduler


def attach_left(
    ctx: RunContext, state: DriveState, plan: AttemptPlan, attempt: dict[str, Any]
) -> AttemptBackend | None:
    """The attempt a dead runner left, supervised again by the backend whose job it runs as
    (whatever this drive's placement: one attempt never runs as two jobs); None if none."""
    name = _left_job(attempt)
    return backend(name).attach(ctx, state, plan, attempt) if name in REGISTRY else None


def end_left(stages: Iterable[dict[str, Any]]) -> None:
    """End the jobs a dead runner's attempts left running (a run's ``stages`` rows)."""
    for stage in stages:
        for attempt in stage["attempts"]:
            name = _left_job(attempt)
            if name in REGISTRY:
                backend(name).end_left(attempt)


def new_attempt(ctx: RunContext, state: DriveState, plan: AttemptPlan) -> AttemptBackend:
    """A new attempt of ``plan.stage`` on its backend in this drive; ``plan.inherited`` is the
    run's parent when this stage continues it (refused at submit where a backend cannot)."""
    return backend(backend_of(ctx.placement, plan.stage)).new_attempt(ctx, state, plan)


__all__ = [
    "HERE",
    "AttemptBackend",
    "Backend",
    "EndsWithItsRunner",
    "Placement",
    "Resumed",
    "Submission",
    "attach_left",
    "backend",
    "backend_of",
    "by_backend",
    "check_resume",
    "check_shared_store",
    "check_submit",
    "end_left",
    "new_attempt",
    "option_values",
    "refuse_lineage",
]
