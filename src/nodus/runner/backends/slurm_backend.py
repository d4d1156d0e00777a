"""The Slurm backend (``backend = "slurm"``): its acceptance checks and its attempts.

Each attempt is a Slurm job (:mod:`.slurm`) whose tasks run nodus's node side
(:mod:`.slurm_node`, :mod:`.node`). What a run on Slurm needs, checked when it is submitted or
resumed, so a run is refused before it is accepted, never accepted and then failed:

    a controller   ``scontrol ping`` answers (Slurm's commands on the PATH, ``SLURM_CONF``)
    the store      one every node reaches: an object store, or a ``file://`` store on a
                   filesystem the nodes mount, declared with ``[execution] shared_store = true``
    the placement  ``sbatch --test-only`` takes each stage's job (partition, account, QOS, time
                   limit, nodes, CPUs, memory, GPUs, ``sbatch_options``): Slurm's words if not

Starting from another run's snapshot is not supported yet there (as on Ray).
"""

from __future__ import annotations

from typing import Any

from nodus.errors import UsageError
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.backends import slurm_jobs
from nodus.runner.backends.base import (
    AttemptBackend,
    Submission,
    check_shared_store,
    refuse_lineage,
)
from nodus.schemas.backends import SLURM, BackendEntry

_HOW = 'docs/cluster.md, "Slurm": run nodus where sbatch works (a login node) with SLURM_CONF'


class SlurmBackend:
    """A Slurm cluster: refuses what its jobs could not run; each attempt is a job."""

    @property
    def entry(self) -> BackendEntry:
        return SLURM

    def check_submit(self, submission: Submission) -> None:
        if submission.continues is not None:
            refuse_lineage(submission.continues, "Slurm")
        check_shared_store(submission.stages, submission.store_url, submission.is_local, "Slurm")
        why = slurm_jobs.reachable()
        if why is not None:
            raise UsageError(f'backend "slurm": no Slurm controller answers here ({why}); {_HOW}')
        for stage in submission.stages:
            argv = slurm_jobs.sbatch_argv(stage, f"nodus-check-{stage.name}", "/dev/null")
            try:
                slurm_jobs.test_only(argv)
            except slurm_jobs.SlurmError as error:
                raise UsageError(
                    f"stage {stage.name!r}: Slurm would not run its job ({error}); check its "
                    "[execution] partition, account, qos, time_limit, nodes, cpus, memory, "
                    "gpu_count and sbatch_options"
                ) from None

    def check_resume(self, submission: Submission) -> None:
        self.check_submit(submission)

    def new_attempt(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
    ) -> AttemptBackend:
        from nodus.runner.backends.slurm import SlurmAttempt

        return SlurmAttempt(ctx, state, plan)

    def attach(
        self, ctx: RunContext, state: DriveState, plan: AttemptPlan, attempt: dict[str, Any]
    ) -> AttemptBackend | None:
        """A dead runner's attempt whose job may still run, supervised again; None if not."""
        from nodus.runner.backends.slurm import SlurmAttempt

        return SlurmAttempt.attach(ctx, state, plan, attempt)

    def end_left(self, attempt: dict[str, Any]) -> None:
        """Cancel the job of an attempt a dead runner left, and wait until Slurm ended it."""
        from nodus.runner.backends.slurm import cancel_left

        cancel_left(attempt)


BACKEND = SlurmBackend()
