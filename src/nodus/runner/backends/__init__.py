"""Launch backends: where an attempt's program runs.

A backend is a module here and an entry of the registry (:mod:`nodus.schemas.backends`); the
module's ``BACKEND`` answers the protocol of :mod:`.base` (its acceptance checks at submit and
resume, its attempts, the attempt a dead runner left that still runs). ``local`` runs the
attempt on this machine; ``ray`` runs it on Ray cluster nodes and ``slurm`` as a Slurm job, each
as node runners (:mod:`.node`) that do there what a local attempt does here, with the node
roles, supervised from the runner alike (:mod:`.cluster`). Ray is imported only when a stage's
backend is ``ray``: the CLI and the local path never load it (``tests/test_layering.py``
checks). Adding a backend: docs/internals.md.

    base.py         the protocol: ``Backend``, ``AttemptBackend``, ``Submission``; the registry's
                    lookup (``backend``), ``new_attempt`` and the acceptance checks by backend
    local.py        the local backend: ``Attempt`` here; a resume keeps the run's allocation
    ray_backend.py  the Ray backend: what a run on a Ray cluster needs, checked at submit and
                    resume; its attempts (``ray``)
    cluster.py      a cluster attempt, runner side: the node runners' news into the catalog,
                    retention per commit, relays in, how the ranks' ends decide the attempt's
    ray.py          the Ray backend, runner side: placement, polls through actors, node loss
    node.py         the node side of Ray and Slurm: the agent, the node runner, the node roles
    slurm_backend.py  the Slurm backend: its checks at submit and resume; its attempts
    slurm.py        the Slurm backend, runner side: a job per attempt, its folder, re-attaching
    slurm_jobs.py   Slurm's commands: the job's sbatch line, its state, scancel
    slurm_node.py   the Slurm backend, node side: each node's task, relaying through the folder

May import: catalog, processes, workspace, upkeep, remote, attempt.
"""

from __future__ import annotations

from nodus.runner.backends.base import (
    HERE,
    AttemptBackend,
    Backend,
    Placement,
    backend,
    backend_of,
    new_attempt,
)

__all__ = ["HERE", "AttemptBackend", "Backend", "Placement", "backend", "backend_of", "new_attempt"]
