"""Launch backends: where an attempt's program runs.

A backend is a module here and an entry of the registry (:mod:`nodus.schemas.backends`); the
module's ``BACKEND`` answers the protocol of :mod:`.base` (its acceptance checks at submit and
resume, its attempts). ``local`` runs the attempt on this machine; ``ray`` runs it on Ray
cluster nodes, as a node runner (:mod:`.node`) that does there what a local attempt does here,
with the node roles. Ray is imported only when a stage's backend is ``ray``: the CLI and the
local path never load it (``tests/test_layering.py`` checks). Adding a backend: docs/internals.md.

    base.py         the protocol: ``Backend``, ``AttemptBackend``, ``Submission``; the registry's
                    lookup (``backend``), ``new_attempt`` and the acceptance checks by backend
    local.py        the local backend: ``Attempt`` here; a resume keeps the run's allocation
    ray_backend.py  the Ray backend: what a run on a Ray cluster needs, checked at submit and
                    resume; its attempts (``ray``)
    ray.py          the Ray backend, runner side: placement, relay, node loss
    node.py         the Ray backend, node side: the agent actor, the node runner, the node roles

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
