"""The Ray backend, runner side: an attempt whose program runs on Ray cluster nodes.

Each attempt places one :class:`~nodus.runner.backends.node.NodeAgent` actor per node the
stage asks for (``[execution] nodes``; more than one: a placement group, strict spread), each
reserving the stage's ``cpus``, ``gpu_count`` and ``memory``. The agents start node runners
(:mod:`.node`) that lay the working copy out from the run's store and run the attempt there;
what this side does with their news (the catalog, retention, relays, how the attempt ended) is
every cluster backend's (:mod:`.cluster`). An agent that no longer answers is a lost node.

Multi-node stages get the ``torch.distributed`` rendezvous environment: ``MASTER_ADDR`` (rank
0's node), ``MASTER_PORT`` (a free port there), ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``
(one process per node: 0). Every rank restores the same snapshot: the runner chooses it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import Any

from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.backends.cluster import NOTICE_SIGNALS, ClusterAttempt, News
from nodus.runner.backends.node import NodeAgent
from nodus.runner.catalog.phases import AttemptOutcome

PLACEMENT_TIMEOUT_S = 600.0
"""How long an attempt waits for the cluster to have room for it before it fails."""

_POLL_TIMEOUT_S = 60.0  # an agent that does not answer a poll for this long is lost


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (Ray's ``auto``: its own lookup) once."""
    import ray

    if ray.is_initialized():
        return
    # ray.init replaces the SIGTERM handler (its own exits the process at once); the runner's
    # handlers take a signal as a preemption notice to relay to the nodes, so they are put back.
    kept = {signum: signal.getsignal(signum) for signum in NOTICE_SIGNALS}
    ray.init(
        address=address,
        namespace="nodus",
        logging_level=logging.ERROR,
        log_to_driver=False,
        configure_logging=False,
    )
    for signum, handler in kept.items():
        # Ray sets its own only from the main thread; None: not set from Python, kept as it is
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


class RayAttempt(ClusterAttempt):
    """One attempt of a stage on Ray; ``number`` is allocated here, in the runner's catalog."""

    def __init__(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        address: str,
    ) -> None:
        super().__init__(ctx, state, plan)
        self.address = address  # the cluster it joins (ray_backend: --ray-address, …)
        self.agents: list[Any] = []
        self._group = None
        self._places: list[dict[str, str]] = []
        self._after = [0] * self.ranks
        self._output_at = [0] * self.ranks

    def _start(self) -> Outcome | None:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            connect(self.address)
            places = self._places = self._place()
        except (ConnectionError, RuntimeError, ValueError, GetTimeoutError) as error:
            return Outcome(AttemptOutcome.FAILED, f"no place on the Ray cluster: {error}")
        except RayError as error:
            return Outcome(AttemptOutcome.LOST, f"a node was lost while placing: {error}")
        self._record_places(places)
        restore = self.chosen_restore()
        rendezvous = self._rendezvous(places)
        specs = [
            self.spec(rank, restore, dict(rendezvous, RANK=str(rank)) if rendezvous else {})
            for rank in range(self.ranks)
        ]
        ray.get([agent.start.remote(spec) for agent, spec in zip(self.agents, specs)])
        return None

    # --- placement ------------------------------------------------------------------------

    def _place(self) -> list[dict[str, str]]:
        """One agent per node, each with the stage's resources; where each one landed."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        execution = self.stage.execution
        resources: dict[str, Any] = {"num_cpus": execution.cpus, "num_gpus": execution.gpu_count}
        if execution.memory:
            resources["memory"] = execution.memory
        agent = ray.remote(NodeAgent)
        if execution.nodes > 1:
            bundle = {"CPU": execution.cpus, "GPU": execution.gpu_count}
            if execution.memory:
                bundle["memory"] = execution.memory
            group = ray.util.placement_group([bundle] * execution.nodes, strategy="STRICT_SPREAD")
            self._group = group
            ray.get(group.ready(), timeout=PLACEMENT_TIMEOUT_S)
        for rank in range(execution.nodes):
            options = dict(resources, max_restarts=0, max_concurrency=1)
            if self._group is not None:
                options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                    self._group, placement_group_bundle_index=rank
                )
            self.agents.append(agent.options(**options).remote())
        return ray.get([a.where.remote() for a in self.agents], timeout=PLACEMENT_TIMEOUT_S)

    def _record_places(self, places: list[dict[str, str]]) -> None:
        """``runs get`` shows each attempt's node: its address and Ray node id (rank 0's first)."""
        nodes = ", ".join(f"{p['ip']} (ray node {p['node_id'][:12]})" for p in places)
        self.ctx.catalog.update_attempt(self.ctx.run_id, self.stage.name, self.number, host=nodes)
        for rank, place in enumerate(places):
            self.ctx.event(
                "attempt_placed",
                {"rank": rank, "node": place["ip"], "node_id": place["node_id"]},
                self.stage.name,
                self.number,
            )

    def _rendezvous(self, places: list[dict[str, str]]) -> dict[str, str]:
        if self.stage.execution.nodes == 1:
            return {}
        import ray

        port = ray.get(self.agents[0].free_port.remote())
        return {
            "MASTER_ADDR": places[0]["ip"],
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(self.stage.execution.nodes),
            "LOCAL_RANK": "0",
        }

    # --- supervision ----------------------------------------------------------------------

    def _poll(self) -> list[News] | Outcome:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        calls = [
            a.poll.remote(self._after[r], self._output_at[r]) for r, a in enumerate(self.agents)
        ]
        polled = []
        for rank, call in enumerate(calls):
            try:
                news = ray.get(call, timeout=_POLL_TIMEOUT_S)
            except (RayError, GetTimeoutError) as error:
                return self._lost(rank, self._places[rank], error)
            self._output_at[rank] += len(news["output"])
            self._after[rank] = news.get("last_event", self._after[rank])
            polled.append(news)
        return polled

    def _send_notice(self, signum: int) -> None:
        for agent in self.agents:
            agent.signal.remote(signum)

    def _send_control(self, action: str, args: dict[str, Any]) -> None:
        for agent in self.agents:
            agent.control.remote(action, args)

    def _lost(self, rank: int, place: dict[str, str], error: BaseException) -> Outcome:
        """A rank whose agent no longer answers: its worker or its node is gone."""
        self.ctx.event(
            "node_lost",
            {"rank": rank, "node": place["ip"], "node_id": place["node_id"], "error": str(error)},
            self.stage.name,
            self.number,
        )
        return Outcome(
            AttemptOutcome.LOST,
            f"node {place['ip']} (ray node {place['node_id'][:12]}) of rank {rank} was lost: "
            f"{type(error).__name__}",
        )

    # --- the end --------------------------------------------------------------------------

    def _release(self) -> None:
        """Stop every rank's node runner, then the agents and the placement group."""
        import ray

        for agent in self.agents:
            with contextlib.suppress(Exception):  # a lost agent: nothing of it is left to stop
                ray.get(agent.stop.remote(), timeout=_POLL_TIMEOUT_S)
            ray.kill(agent)
        if self._group is not None:
            ray.util.remove_placement_group(self._group)
