"""The launch-backend protocol: what the engine asks of an attempt, wherever it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from nodus.runner.attempt.attempt import Attempt, Restore
from nodus.runner.attempt.context import RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.upkeep.lineage import Parent
from nodus.schemas.defaults import BACKEND_LOCAL, BACKEND_RAY
from nodus.schemas.resolved import ResolvedStage


@dataclass(frozen=True)
class Placement:
    """Where this drive runs attempts: ``--backend`` (None: each stage's own) and the Ray
    cluster's ``--ray-address`` (None: RAY_ADDRESS, else Ray's own lookup). Options of a drive,
    never stored with the run."""

    backend: str | None = None
    ray_address: str | None = None

    def argv(self) -> list[str]:
        """The same placement as ``python -m nodus.runner.submit.detach`` options."""
        options = ["--backend", self.backend] if self.backend else []
        return options + (["--ray-address", self.ray_address] if self.ray_address else [])


HERE = Placement()
"""No ``--backend`` or ``--ray-address``: each stage's own backend."""


class AttemptBackend(Protocol):
    """One attempt of a stage. ``number`` (allocated when it is made) is its fencing token;
    ``run`` lays the working copy out, runs, captures and supervises the program, and says how
    it ended, with the attempt's end recorded in the catalog."""

    number: int

    def run(self) -> Outcome: ...


def backend_of(ctx: RunContext, stage: ResolvedStage) -> str:
    """The backend that runs ``stage`` in this drive: ``--backend``, else the stage's own."""
    return ctx.backend or stage.execution.backend


def new_attempt(
    ctx: RunContext,
    stage: ResolvedStage,
    source: str,
    restore: Restore,
    overlays: Sequence[str] = (),
    recovering: bool = False,
    inherited: Parent | None = None,
) -> AttemptBackend:
    """A new attempt of ``stage`` on its backend; ``inherited`` is the run's parent when this
    stage continues it (refused at submit on Ray, so only a local attempt gets one)."""
    make = ATTEMPTS[backend_of(ctx, stage)]
    return make(ctx, stage, source, restore, overlays, recovering, inherited)


def _local_attempt(
    ctx: RunContext,
    stage: ResolvedStage,
    source: str,
    restore: Restore,
    overlays: Sequence[str],
    recovering: bool,
    inherited: Parent | None,
) -> AttemptBackend:
    return Attempt(
        ctx, stage, source, restore, overlays, recovering=recovering, inherited=inherited
    )


def _ray_attempt(
    ctx: RunContext,
    stage: ResolvedStage,
    source: str,
    restore: Restore,
    overlays: Sequence[str],
    recovering: bool,
    inherited: Parent | None,
) -> AttemptBackend:
    from nodus.runner.backends.ray import RayAttempt  # imports ray: only for a Ray stage

    return RayAttempt(ctx, stage, source, restore, overlays, recovering=recovering)


ATTEMPTS = {BACKEND_LOCAL: _local_attempt, BACKEND_RAY: _ray_attempt}
"""How each backend the workload schema names (``schemas.defaults.BACKENDS``) makes an attempt."""
