"""What a run on a Ray cluster needs, checked when it is submitted or resumed.

Every node writes snapshots to the run's store and lays working copies out from it, so the
store must be one every node reaches: an object store (``s3://``, ``gs://``, …), or a
``file://`` path on a filesystem every node mounts at the same path, declared so with
``[execution] shared_store = true``. A node-local store (``file://`` not declared shared,
``memory://``) is refused with the reason, as is a Ray stage where Ray is not installed, and one
no cluster answers for: the run is refused before it is accepted, never accepted and then failed.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Iterable

from nodus.errors import UsageError
from nodus.schemas.defaults import BACKEND_RAY
from nodus.schemas.resolved import ResolvedStage

RAY_LOOKUP = "auto"  # Ray's word for "the cluster this machine is a node of"; never a new one
_IN_PROCESS = ("memory",)  # stores that live in one process: no other node can reach them
_ANSWER_S = 3.0  # how long the cluster's head gets to accept a connection
_HOW = (
    "give its address with --ray-address HOST:PORT or RAY_ADDRESS, or start one "
    "(docs/cluster.md: ray start --head)"
)


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


def check_cluster_reachable(
    stages: Iterable[ResolvedStage], backend: str | None, address: str | None
) -> None:
    """UsageError when a stage runs on Ray and no cluster answers where its attempt would join
    (``address``, else RAY_ADDRESS, else Ray's own lookup of this machine's cluster)."""
    if not any((backend or s.execution.backend) == BACKEND_RAY for s in stages):
        return
    given = address or os.environ.get("RAY_ADDRESS") or None
    where = given if given not in (None, RAY_LOOKUP) else _this_machines_cluster()
    if where is None:
        raise UsageError(f'backend "ray": no Ray cluster was found on this machine; {_HOW}')
    host, _, port = where.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # a form only Ray resolves ("local"): ray.init says what it makes of it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_ANSWER_S).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise UsageError(
            f'backend "ray": no Ray cluster answers at {where} ({reason}); {_HOW}'
        ) from None


def _this_machines_cluster() -> str | None:
    """The address Ray's ``auto`` joins: the newest ``ray start`` of this machine, if any."""
    from ray._private.services import get_ray_address_from_environment

    try:
        return get_ray_address_from_environment(RAY_LOOKUP, None)
    except ConnectionError:
        return None
