"""The Ray backend (``backend = "ray"``): its acceptance checks and its attempts.

Its attempt (:mod:`.ray`, loaded with Ray only when a stage runs there) places node agents and
relays; the node side (:mod:`.node`) runs an ordinary attempt on each node with the node roles.

What a run on a Ray cluster needs, checked when it is submitted or resumed:
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
from collections.abc import Callable, Iterable

from nodus.errors import UsageError
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.backends.base import (
    AttemptBackend,
    EndsWithItsRunner,
    Submission,
    check_shared_store,
    refuse_lineage,
)
from nodus.schemas.backends import RAY, BackendEntry
from nodus.schemas.resolved import ResolvedStage

ADDRESS = RAY.options[0].flag  # --ray-address: the cluster a drive joins

RAY_LOOKUP = "auto"  # Ray's word for "the cluster this machine is a node of"; never a new one
_ANSWER_S = 3.0  # how long the cluster's head gets to accept a connection
_HOW = (
    "give its address with --ray-address HOST:PORT or RAY_ADDRESS, or start one "
    "(docs/cluster.md: ray start --head)"
)


class RayBackend(EndsWithItsRunner):
    """A Ray cluster: refuses what its nodes could not run; its attempts place node agents."""

    @property
    def entry(self) -> BackendEntry:
        return RAY

    def check_submit(self, submission: Submission) -> None:
        if submission.continues is not None:
            refuse_lineage(submission.continues, "Ray")
        check_cluster_stages(submission.stages, submission.store_url, submission.is_local)
        check_cluster_reachable(submission.placement.option(ADDRESS))

    def check_resume(self, submission: Submission) -> None:
        self.check_submit(submission)

    def new_attempt(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
    ) -> AttemptBackend:
        from nodus.runner.backends.ray import RayAttempt  # imports ray: only for a Ray stage

        address = ctx.placement.option(ADDRESS) or os.environ.get("RAY_ADDRESS") or RAY_LOOKUP
        return RayAttempt(ctx, state, plan, address)


BACKEND = RayBackend()


def check_cluster_stages(
    on_ray: Iterable[ResolvedStage], store_url: str, is_local: Callable[[], bool]
) -> None:
    """UsageError when stages that run on Ray cannot: no Ray here, or a node-local store."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError(
            'backend "ray" needs Ray on this machine: install nodus with the ray extra '
            "(pip install 'nodus[ray]')"
        )
    check_shared_store(on_ray, store_url, is_local, "Ray")


def check_cluster_reachable(address: str | None) -> None:
    """UsageError when no cluster answers where an attempt would join (``address``, else
    RAY_ADDRESS, else Ray's own lookup of this machine's cluster)."""
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
        found: str | None = get_ray_address_from_environment(RAY_LOOKUP, None)
        return found
    except ConnectionError:
        return None
