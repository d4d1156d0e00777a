"""The Ray backend, runner side: an attempt whose program runs on Ray cluster nodes.

Each attempt places one :class:`~nodus.runner.backends.node.NodeAgent` actor per node the
stage asks for (``[execution] nodes``; more than one: a placement group, strict spread), each
reserving the stage's ``cpus``, ``gpu_count`` and ``memory``. The agents start node runners
(:mod:`.node`) that lay the working copy out from the run's store and run the attempt there;
this side keeps the catalog, relays controls and notices in, and events, output and outcome
out, and runs retention for every commit the node reports.

How an attempt on Ray ends, beyond what a local one can:

    a lost agent   its worker process was killed, or its node died or was preempted: an
                   interruption like any other (the run recovers on another node)
    several ranks  the first rank that ends other than succeeded decides, the others are
                   stopped; a rank interrupted or lost makes the attempt lost

Multi-node stages get the ``torch.distributed`` rendezvous environment: ``MASTER_ADDR`` (rank
0's node), ``MASTER_PORT`` (a free port there), ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``
(one process per node: 0). Every rank restores the same snapshot: the runner chooses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from nodus._atomic import create_private, private_folder
from nodus.runner.attempt.attempt import Restore, record_end
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.backends.node import NodeAgent, forwarded_environment
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.remote.adoption import record_of
from nodus.runner.upkeep.rotation import Rotation
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults
from nodus.store import restorable

PLACEMENT_TIMEOUT_S = 600.0
"""How long an attempt waits for the cluster to have room for it before it fails."""

_POLL_TIMEOUT_S = 60.0  # an agent that does not answer a poll for this long is lost
_RELAYED_CONTROLS = ("cancel", "pause")
_NOTICE_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # the runner's preemption notice
# The node pause's progress, as `runs pause` and `runs get` read it from the runner's row.
_RELAYED_PAUSE = (
    "state",
    "accepted_at",
    "save_bytes",
    "snapshot",
    "step",
    "failure",
    "timed_out",
    "resources_released",
    "ended_at",
)
_RANKS_SETTLE_S = 10.0  # how long the other ranks get to report once one ended unsuccessfully


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (Ray's ``auto``: its own lookup) once."""
    import ray

    if ray.is_initialized():
        return
    # ray.init replaces the SIGTERM handler (its own exits the process at once); the runner's
    # handlers take a signal as a preemption notice to relay to the nodes, so they are put back.
    kept = {signum: signal.getsignal(signum) for signum in _NOTICE_SIGNALS}
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


class RayAttempt:
    """One attempt of a stage on Ray; ``number`` is allocated here, in the runner's catalog."""

    def __init__(
        self,
        ctx: RunContext,
        state: DriveState,
        plan: AttemptPlan,
        address: str,
    ) -> None:
        self.ctx = ctx
        self.state = state  # the drive's: its preemption notice
        self.address = address  # the cluster it joins (ray_backend: --ray-address, …)
        stage = self.stage = plan.stage
        self.source = plan.source
        self.restore = plan.restore
        self.overlays = list(plan.overlays)
        self.recovering = plan.recovering
        self.number = ctx.catalog.start_attempt(ctx.run_id, stage.name, host=None, devices=0)
        self.ws = Workspace.of(ctx.home, ctx.run_id, stage.name, self.number)
        self.agents: list[Any] = []
        self._group = None
        self._after = [0] * stage.execution.nodes
        self._output_at = [0] * stage.execution.nodes
        self._started = False
        self._pause: int | None = None  # the runner's pause row the node's is relayed to
        self._noticed = False

    def run(self) -> Outcome:
        if not self.recovering:
            self.ctx.catalog.lifecycle.move(self.ctx.run_id, Phase.PREPARING, stage=self.stage.name)
        rotation = Rotation(self.ctx.attempt_context(self.stage, self.number))
        try:
            outcome = self._run(rotation)
        finally:
            self._release()
            rotation.close()
        return self._end(outcome)

    def _run(self, rotation: Rotation) -> Outcome:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            connect(self.address)
            places = self._place()
        except (ConnectionError, RuntimeError, ValueError, GetTimeoutError) as error:
            return Outcome(AttemptOutcome.FAILED, f"no place on the Ray cluster: {error}")
        except RayError as error:
            return Outcome(AttemptOutcome.LOST, f"a node was lost while placing: {error}")
        self._record_places(places)
        restore = self._chosen_restore()
        rendezvous = self._rendezvous(places)
        specs = [self._spec(rank, restore, rendezvous) for rank, _agent in self._ranks()]
        ray.get([agent.start.remote(spec) for agent, spec in zip(self.agents, specs)])
        return self._supervise(places, rotation)

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

    def _ranks(self) -> Iterator[tuple[int, Any]]:
        return enumerate(self.agents)

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

    def _chosen_restore(self) -> Restore:
        """The newest restorable snapshot, by step, so every rank lays out the same one."""
        if not self.restore.newest:
            return self.restore
        manifests = self.ctx.store.list(run=self.ctx.run_id, stage=self.stage.name)
        newest = restorable.newest_first(manifests)
        if not newest:
            return self.restore
        return Restore(step=newest[0].step, by_hand=self.restore.by_hand)

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

    def _spec(self, rank: int, restore: Restore, rendezvous: dict[str, str]) -> dict[str, Any]:
        record = record_of(self.ctx.catalog.get_run(self.ctx.run_id), None)
        for stage in record["stages"]:  # the node allocates this attempt's number itself
            if stage["name"] == self.stage.name:
                stage["attempts"] = [a for a in stage["attempts"] if a["number"] < self.number]
        env = forwarded_environment(dict(os.environ))
        if rendezvous:
            env.update(rendezvous, RANK=str(rank))
        return {
            "record": record,
            "store": self.ctx.store.url,
            "stage": self.stage.name,
            "number": self.number,
            "rank": rank,
            "source": self.source,
            "restore": {"newest": restore.newest, "step": restore.step, "by_hand": False},
            "overlays": self.overlays,
            "recovering": self.recovering,
            "env": env,
        }

    # --- supervision ----------------------------------------------------------------------

    def _supervise(self, places: list[dict[str, str]], rotation: Rotation) -> Outcome:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        ended: dict[int, Outcome] = {}
        settle_until: float | None = None
        while True:
            self._relay_in()
            calls = [a.poll.remote(self._after[r], self._output_at[r]) for r, a in self._ranks()]
            for rank, call in enumerate(calls):
                try:
                    news = ray.get(call, timeout=_POLL_TIMEOUT_S)
                except (RayError, GetTimeoutError) as error:
                    return self._lost(rank, places[rank], error)
                outcome = self._take(rank, news, rotation)
                if outcome is not None:
                    ended[rank] = outcome
            if settle_until is None and any(o.kind != "succeeded" for o in ended.values()):
                # A rank's loss breaks the others' collectives: they fail soon after. Wait a
                # moment for the rank that was interrupted to say so before deciding.
                settle_until = time.monotonic() + _RANKS_SETTLE_S
            settled = settle_until is not None and time.monotonic() >= settle_until
            decided = _decide(ended, len(self.agents), settled)
            if decided is not None:
                return decided
            time.sleep(defaults.POLL_S)

    def _relay_in(self) -> None:
        """A preemption notice goes to every rank; a cancel or pause to the node attempt(s)."""
        if self.state.notice is not None and not self._noticed:
            self._noticed = True
            for _rank, agent in self._ranks():
                agent.signal.remote(self.state.notice or signal.SIGTERM)
        for control in list(self.ctx.catalog.pending_controls(self.ctx.run_id)):
            if control["action"] not in _RELAYED_CONTROLS:
                continue
            self.ctx.catalog.mark_handled(control["id"])
            args = dict(control["args"])
            if control["action"] == "pause":
                pause = self.ctx.catalog.pause_for_control(control["id"])
                if pause is None:
                    continue
                self._pause = pause["id"]
                args["deadline_s"] = pause["deadline_s"]
            for _rank, agent in self._ranks():
                agent.control.remote(control["action"], args)

    def _take(self, rank: int, news: dict[str, Any], rotation: Rotation) -> Outcome | None:
        """Apply one rank's news here; its outcome once it ended."""
        if news["output"]:
            self._output_at[rank] += len(news["output"])
            self._write_output(news["output"])
        self._after[rank] = news.get("last_event", self._after[rank])
        for event in news["events"]:
            if event["type"] == "attempt_ended":
                continue  # this side records the attempt's end
            details = dict(event["details"], **({"rank": rank} if rank else {}))
            self.ctx.event(event["type"], details, self.stage.name, self.number)
            if event["type"] == "snapshot_committed":
                rotation.request()
        attempt = news["attempt"]
        if rank == 0 and attempt is not None:
            self._mirror(attempt)
        if rank == 0 and news["pause"] is not None and self._pause is not None:
            self._relay_pause(self._pause, news["pause"])
        if news["outcome"] is None:
            return None
        return Outcome(AttemptOutcome(news["outcome"]["kind"]), news["outcome"]["detail"])

    def _mirror(self, attempt: dict[str, Any]) -> None:
        """The node attempt's progress as this catalog shows it: restored snapshot, running."""
        catalog, run_id, stage = self.ctx.catalog, self.ctx.run_id, self.stage.name
        if attempt["pid"] is None or self._started:
            return
        self._started = True
        catalog.update_attempt(
            run_id,
            stage,
            self.number,
            pid=attempt["pid"],
            log_path=self.ws.log_path,
            restored_snapshot=attempt["restored_snapshot"],
            restored_step=attempt["restored_step"],
        )
        catalog.lifecycle.move(run_id, Phase.RUNNING, stage=stage)

    def _relay_pause(self, pause_id: int, pause: dict[str, Any]) -> None:
        values = {key: pause[key] for key in _RELAYED_PAUSE if key in pause}
        self.ctx.catalog.update_pause(pause_id, **values)

    def _write_output(self, data: bytes) -> None:
        private_folder(os.path.dirname(self.ws.log_path))
        with os.fdopen(create_private(self.ws.log_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
            log.write(data)
        self.ctx.terminal.write(data.decode("utf-8", "replace"))
        self.ctx.terminal.flush()

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

        for _rank, agent in self._ranks():
            with contextlib.suppress(Exception):  # a lost agent: nothing of it is left to stop
                ray.get(agent.stop.remote(), timeout=_POLL_TIMEOUT_S)
            ray.kill(agent)
        if self._group is not None:
            ray.util.remove_placement_group(self._group)

    def _end(self, outcome: Outcome) -> Outcome:
        return record_end(self.ctx, self.stage.name, self.number, outcome)


def _decide(ended: dict[int, Outcome], ranks: int, settled: bool) -> Outcome | None:
    """How the attempt ended, once it has: every rank succeeded (rank 0's outcome); a rank was
    interrupted (an interruption); or, once the ranks had ``_RANKS_SETTLE_S`` to report, the
    lowest rank that ended otherwise."""
    unsuccessful = {r: o for r, o in ended.items() if o.kind != AttemptOutcome.SUCCEEDED}
    if not unsuccessful:
        return ended[0] if len(ended) == ranks else None
    interrupted = [r for r, o in unsuccessful.items() if o.kind == AttemptOutcome.LOST]
    if not (interrupted or settled or len(ended) == ranks or ranks == 1):
        return None
    rank = min(interrupted or unsuccessful)
    chosen = unsuccessful[rank]
    return chosen if ranks == 1 else Outcome(chosen.kind, f"rank {rank}: {chosen.detail}")
