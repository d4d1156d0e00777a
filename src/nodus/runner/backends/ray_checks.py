"""What a run on a Ray cluster needs, checked when it is submitted or resumed.

Every node writes snapshots to the run's store and lays working copies out from it, so the
store must be one every node reaches: an object store (``s3://``, ``gs://``, …), or a
``file://`` path on a filesystem every node mounts at the same path, declared so with
``[execution] shared_store = true``. A node-local store (``file://`` not declared shared,
``memory://``) is refused with the reason, as is a Ray stage where Ray is not installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from nodus.errors import UsageError
from nodus.schemas.defaults import BACKEND_RAY
from nodus.schemas.resolved import ResolvedStage

_IN_PROCESS = ("memory",)  # stores that live in one process: no other node can reach them


def check_cluster_stages(
    stages: Iterable[ResolvedStage], store_url: str, is_local: bool, backend: str | None
) -> None:
    """UsageError when a stage that runs on Ray (``backend`` overrides each stage's) cannot."""
    on_ray = [s for s in stages if (backend or s.execution.backend) == BACKEND_RAY]
    if not on_ray:
        return
    if importlib.util.find_spec("ray") is None:
        raise UsageError(
            'backend "ray" needs Ray on this machine: install nodus with the ray extra '
            "(pip install 'nodus[ray]')"
        )
    scheme = store_url.split("://", 1)[0] if "://" in store_url else "file"
    unshared = [s.name for s in on_ray if not s.execution.shared_store]
    if scheme in _IN_PROCESS or (is_local and unshared):
        names = ", ".join(repr(name) for name in (unshared or [s.name for s in on_ray]))
        raise UsageError(
            f"stage {names} runs on Ray, but the store {store_url} is node-local: other nodes "
            "cannot lay out the source or store snapshots there. Give an object store "
            "(--store s3://…), or a file:// store on a filesystem every node mounts at the "
            "same path, declared with [execution] shared_store = true"
        )


def check_node_count(stages: Iterable[ResolvedStage], backend: str | None) -> None:
    """A resume keeps the node count the run was accepted with: refused otherwise."""
    for stage in stages:
        if backend and backend != BACKEND_RAY and stage.execution.nodes > 1:
            raise UsageError(
                f"stage {stage.name!r} was accepted with nodes = {stage.execution.nodes} on "
                f"Ray; --backend {backend} runs 1 process on this machine. Resume it with "
                f"--backend ray (and {stage.execution.nodes} nodes)"
            )
