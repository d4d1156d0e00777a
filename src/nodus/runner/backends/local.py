"""The local backend: a stage's attempts run on this machine (``backend = "local"``).

Its attempt is :class:`nodus.runner.attempt.attempt.Attempt` with the local role
(:data:`~nodus.runner.attempt.role.LOCAL_ROLE`). A resume
here keeps the allocation the run's attempts had: one process (a stage accepted with several
nodes elsewhere is refused) and the device count recorded with its attempts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from nodus.errors import UsageError
from nodus.runner.attempt.attempt import Attempt
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.backends.base import AttemptBackend, EndsWithItsRunner, Resumed, Submission
from nodus.runner.workspace.launch import device_count
from nodus.schemas.backends import LOCAL, BackendEntry
from nodus.schemas.resolved import ResolvedStage


class LocalBackend(EndsWithItsRunner):
    """This machine: nothing to check at submit; a resume keeps the run's allocation."""

    @property
    def entry(self) -> BackendEntry:
        return LOCAL

    def check_submit(self, submission: Submission) -> None:
        pass

    def check_resume(self, submission: Submission) -> None:
        _check_node_count(submission.stages)
        if submission.resumed is not None:
            _check_devices(submission.resumed, submission.stages)

    def new_attempt(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
    ) -> AttemptBackend:
        return Attempt(ctx, state, plan)


BACKEND = LocalBackend()


def _check_node_count(stages: Sequence[ResolvedStage]) -> None:
    """A resume keeps the node count the run was accepted with: this machine runs one."""
    for stage in stages:
        if stage.execution.nodes > 1:
            raise UsageError(
                f"stage {stage.name!r} was accepted with nodes = {stage.execution.nodes} on "
                f"backend {stage.execution.backend!r}; --backend {LOCAL.name} runs 1 process on "
                f"this machine. Resume it with --backend {stage.execution.backend} (and "
                f"{stage.execution.nodes} nodes)"
            )


def _check_devices(resumed: Resumed, stages: Sequence[ResolvedStage]) -> None:
    """A resumed attempt here needs the device count the run's attempts were given."""
    if resumed.stage is None or resumed.stage not in {s.name for s in stages}:
        return
    attempts = resumed.catalog.attempts(resumed.run.id, resumed.stage)
    recorded = next((a["devices"] for a in reversed(attempts) if a["devices"] is not None), None)
    here = device_count()
    if recorded is not None and recorded != here:
        raise UsageError(
            f"{resumed.run.id} ran with {recorded} device(s) but this resume would have "
            f"{here} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}"
            f"); give it {recorded} device(s) to resume it"
        )
