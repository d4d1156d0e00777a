"""Launch backends: where an attempt's program runs.

``local`` (:class:`nodus.runner.attempt.attempt.Attempt`, today's path, unchanged) runs it on this
machine; ``ray`` (:mod:`.ray`) runs it on a Ray cluster node, as a node runner
(:mod:`.node`) that does there what a local attempt does here. Both answer the one protocol of
:mod:`.base`. Ray is imported only when a stage's backend is ``ray``: the CLI and the local
path never load it (``tests/test_layering.py`` checks).

    base.py         the protocol: ``AttemptBackend``, ``new_attempt``, ``Placement``
    ray.py          the Ray backend, runner side: placement, relay, node loss
    node.py         the Ray backend, node side: the agent actor and the node runner
    ray_checks.py   what a run on a Ray cluster needs, checked at submit and resume

May import: catalog, processes, workspace, upkeep, remote, attempt.
"""

from __future__ import annotations

from nodus.runner.backends.base import HERE, AttemptBackend, Placement, backend_of, new_attempt

__all__ = ["HERE", "AttemptBackend", "Placement", "backend_of", "new_attempt"]
