"""The node side of the Ray backend: a node runner that does one attempt there as it is done here.

On the node, :class:`NodeAgent` (a Ray actor, placed with the stage's resources by :mod:`.ray`)
starts ``python -m nodus.runner.backends.node SPEC`` in a private home of the node. That node runner
writes the run's rows (the runner's record of it, :mod:`nodus.runner.remote.adoption`) into a
catalog of its own and runs one ordinary :class:`~nodus.runner.attempt.attempt.Attempt`: the working
copy is laid out from the run's source in the store, the program runs under the same supervisor and
containment, captures go to the run's store (staged and uploaded as for any remote store) and the
attempt is fenced by its number. So the integrations and the directory contract work there
unchanged.

What stays with the runner (where ``nodus run`` was started): the run's catalog, the choice of
attempts, retention (the node attempt never rotates: the runner runs a pass for each commit
the node reports) and the CLI. The agent relays in both directions: the node's events, pause
record, program output and outcome go back (``poll``); a preemption notice (``signal``), a
cancel or a pause (``control``) come in.

Each rank's attempt has a :class:`NodeRole`: no retention on the node, tokens of its rank, and
for rank ``k > 0`` of a multi-node stage the same copy and the same restored snapshot, but no
captures and no uploads (only node 0 captures).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from types import FrameType
from typing import Any

from nodus._atomic import open_private, private_folder, write_json_atomic
from nodus.protocol import NodePlace
from nodus.runner.attempt.attempt import Attempt, Restore
from nodus.runner.attempt.context import AttemptPlan, DriveState, RunContext
from nodus.runner.attempt.outcome import Outcome
from nodus.runner.catalog.attempt_context import AttemptContext
from nodus.runner.catalog.core import Catalog
from nodus.runner.processes.containment import kill_carriers, record_survivors, run_prefix
from nodus.runner.upkeep.rotation import Rotation
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage

NODE_HOME_VAR = "NODUS_NODE_HOME"
"""Where a node keeps its node runners' homes; default ``<temp>/nodus-node-<uid>``."""

_SPEC, _RESULT, _OUTPUT = "spec.json", "result.json", "node.log"
_PR_SET_PDEATHSIG = 1
# Variables of the runner's environment a node runner takes over: nodus's own settings and fault
# injection. Credentials and the rest of the environment are the node's.
_FORWARDED_PREFIX = "NODUS_"
_NOT_FORWARDED = ("NODUS_HOME", "NODUS_STORE", NODE_HOME_VAR)


def forwarded_environment(environ: dict[str, str]) -> dict[str, str]:
    """The runner's ``NODUS_*`` settings a node runner applies too."""
    return {
        name: value
        for name, value in environ.items()
        if name.startswith(_FORWARDED_PREFIX) and name not in _NOT_FORWARDED
    }


def node_home(run_id: str, rank: int) -> str:
    """The node runner's home: the same path for every attempt of a rank, so the working copy
    is at one path in every attempt (docs/hf-trainer.md, "The profile"), and apart per rank."""
    base = os.environ.get(NODE_HOME_VAR) or os.path.join(
        tempfile.gettempdir(), f"nodus-node-{os.getuid()}"
    )
    return os.path.join(base, run_id, f"rank{rank}")


@dataclass(frozen=True)
class NodeRole:
    """The role of an attempt on a Ray node (:class:`~nodus.runner.attempt.role.AttemptRole`):
    a local attempt whose retention the runner does (told of each commit by the relay).

    Its processes carry a token of the run *and rank*, so the sweep before an attempt kills
    what an earlier attempt of this rank left on the node, never another rank's program (two
    ranks share a machine only in a local test cluster, but then they must not kill each other).
    Rank ``k > 0`` of a multi-node stage (a follower) lays out the same copy and restores the
    same snapshot, but captures and uploads nothing: node 0 captures for the stage.
    """

    rank: int

    @property
    def captures(self) -> bool:
        return self.rank == 0

    def scope(self, run_id: str) -> str:
        return f"{run_id}:rank{self.rank}"

    def sweep(self, catalog: Catalog, run_id: str) -> None:
        survivors = kill_carriers(run_prefix(self.scope(run_id)))
        record_survivors(catalog, run_id, survivors)

    def rotation(self, context: AttemptContext) -> Rotation | None:
        return None  # the runner's: each commit the node reports asks it for a pass

    def hang_timeout(self, stage: ResolvedStage) -> float | str:
        """Node 0 watches the world's progress (its steps, saves and commits); a follower's
        program may rightly stay silent, and node 0's end ends the world."""
        return stage.execution.hang_timeout if self.rank == 0 else defaults.HANG_TIMEOUT_OFF

    def node(self, stage: ResolvedStage) -> NodePlace | None:
        """Told to the integration (its settings): a world spread over the stage's nodes is
        admitted there, one process per node, node 0 holding rank 0."""
        return NodePlace(rank=self.rank, nodes=stage.execution.nodes)


# --- the node runner: python -m nodus.runner.backends.node HOME ----------------------------------


def main(argv: list[str]) -> int:
    home = argv[0]
    spec = _read(os.path.join(home, _SPEC))
    os.environ.update(spec["env"])  # nodus settings and the rendezvous variables
    outcome = _run_attempt(home, spec)
    write_json_atomic(
        os.path.join(home, _RESULT), {"kind": str(outcome.kind), "detail": outcome.detail}
    )
    return 0


def _run_attempt(home: str, spec: dict[str, Any]) -> Outcome:
    from nodus.runner.catalog.core import Catalog
    from nodus.runner.remote.adoption import adopt_record
    from nodus.runner.workspace.launch import stored
    from nodus.schemas.resolved import ResolvedWorkload
    from nodus.store import open_store

    catalog = Catalog(home)
    record = spec["record"]
    adopt_record(catalog, record, spec["store"])
    run = catalog.get_run(record["id"])
    stage = ResolvedWorkload.from_dict(run.workload).stage(spec["stage"])
    ctx = RunContext(
        home=home,
        catalog=catalog,
        store=open_store(spec["store"]),
        run_id=run.id,
        terminal=sys.stdout,
        launches=stored(run.launch),
    )

    catalog.add_fence(_StoreFence(ctx.store))

    state = DriveState()

    def notice(signum: int, _frame: FrameType | None) -> None:  # the runner's, relayed
        state.notice = signum

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, notice)
    plan = AttemptPlan.of(
        stage,
        spec["source"],
        Restore(**spec["restore"]),
        spec["overlays"],
        recovering=spec["recovering"],
    )
    attempt = Attempt(ctx, state, plan, role=NodeRole(spec["rank"]))
    if attempt.number != spec["number"]:  # the record was built for this very attempt
        raise RuntimeError(f"node attempt {attempt.number} is not the runner's {spec['number']}")
    return attempt.run()


class _StoreFence:
    """Refuse a commit once the runner started a newer attempt of the stage.

    The node's own catalog knows only this attempt; the runner's record in the store (written
    at every change of its catalog, :mod:`nodus.runner.remote.record`) knows them all. A node
    the runner gave up on (lost, partitioned, its agent killed while the program ran on) can
    then never commit into the run.
    """

    def __init__(self, store: Any) -> None:
        from nodus.store.run_records import RunRecords

        self.records = RunRecords(store.storage)

    def __call__(self, run_id: str, stage: str, attempt: int) -> None:
        from nodus.errors import StaleAttemptError

        record = self.records.read(run_id)
        if record is None:
            return
        newest = max(
            (a["number"] for s in record["stages"] if s["name"] == stage for a in s["attempts"]),
            default=0,
        )
        if newest > attempt:
            raise StaleAttemptError(
                f"attempt {attempt} of {run_id}/{stage} on this node was superseded by attempt "
                f"{newest}; its snapshot is not committed"
            )


def _read(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# --- the agent: a Ray actor on the node ----------------------------------------------------------


class NodeAgent:
    """Starts the node runner and relays between it and the runner. Ray makes it an actor
    (:mod:`.ray`); nothing here imports Ray except :meth:`where`, which runs inside one."""

    def __init__(self) -> None:
        self.home: str | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.run_id = self.stage = ""
        self.number = 0
        self._pause: int | None = None  # the node's pause row relayed to the runner's

    def where(self) -> dict[str, str]:
        """The node this agent was placed on: its address and Ray node id."""
        import ray

        return {
            "ip": str(ray.util.get_node_ip_address()),  # type: ignore[no-untyped-call,unused-ignore]
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": socket.gethostname(),
        }

    def free_port(self) -> int:
        """A free TCP port on this node (rank 0's: the rendezvous port)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def start(self, spec: dict[str, Any]) -> None:
        """Lay out the node runner's home and start it; it dies with this agent."""
        self.run_id, self.stage, self.number = spec["record"]["id"], spec["stage"], spec["number"]
        self.home = node_home(self.run_id, spec["rank"])
        private_folder(self.home)  # under the shared temporary folder: 0700
        for stale in (_RESULT, _OUTPUT):
            if os.path.exists(os.path.join(self.home, stale)):
                os.unlink(os.path.join(self.home, stale))
        write_json_atomic(os.path.join(self.home, _SPEC), spec)
        from nodus.runner.catalog.core import Catalog

        Catalog(self.home).close()  # made here, so the agent's reads never race its creation
        with open_private(os.path.join(self.home, _OUTPUT)) as output:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "nodus.runner.backends.node", self.home],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    def poll(self, after_event: int, output_at: int) -> dict[str, Any]:
        """What happened since: events after ``after_event``, output from ``output_at``, the
        attempt's row, the relayed pause, and the outcome once the node runner ended."""
        assert self.home is not None and self.child is not None
        ended = self.child.poll()
        answer: dict[str, Any] = {
            "events": [],
            "attempt": None,
            "pause": None,
            "output": b"",
            "outcome": None,
        }
        answer["output"] = read_from(os.path.join(self.home, _OUTPUT), output_at)
        answer.update(self._catalog_news(after_event))
        if ended is not None:
            result = os.path.join(self.home, _RESULT)
            answer["outcome"] = (
                _read(result)
                if os.path.exists(result)
                else {"kind": "failed", "detail": f"the node runner ended with status {ended}"}
            )
        return answer

    def _catalog_news(self, after_event: int) -> dict[str, Any]:
        from nodus.runner.catalog.core import Catalog

        catalog = Catalog(self.home or "")
        try:
            events = [
                e
                for e in catalog.events(self.run_id, after=after_event)
                if e["stage"] == self.stage and e["attempt"] == self.number
            ]
            rows = _attempts(catalog, self.run_id, self.stage)
            mine = next((a for a in rows if a["number"] == self.number), None)
            pause = catalog.pause_for_control(self._pause) if self._pause else None
            last = catalog.events(self.run_id, after=after_event)
            return {
                "events": events,
                "last_event": last[-1]["id"] if last else after_event,
                "attempt": mine,
                "pause": pause,
            }
        finally:
            catalog.close()

    def signal(self, signum: int) -> None:
        """A preemption notice for the node runner (it asks for a save or forwards SIGTERM)."""
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def control(self, action: str, args: dict[str, Any]) -> None:
        """A cancel or pause for the node attempt, as `nodus runs cancel|pause` would ask."""
        from nodus.runner.catalog.core import Catalog

        catalog = Catalog(self.home or "")
        try:
            if action == "pause":
                pause = catalog.request_pause(self.run_id, args["policy"], args["deadline_s"])
                self._pause = pause["control_id"]
            else:
                catalog.request(self.run_id, action, args)
        finally:
            catalog.close()

    def stop(self) -> None:
        """End the node runner now; its supervisor then ends the program's whole tree."""
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()


def _attempts(catalog: Any, run_id: str, stage: str) -> list[dict[str, Any]]:
    try:
        found: list[dict[str, Any]] = catalog.attempts(run_id, stage)
        return found
    except Exception:  # the node runner has not written the run's rows yet
        return []


def read_from(path: str, offset: int) -> bytes:
    """Up to 1 MiB of ``path`` from ``offset`` (nothing yet: empty)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(1 << 20)
    except FileNotFoundError:
        return b""


def _die_with_parent() -> None:
    """The node runner gets SIGKILL when its agent dies (a lost worker, a killed actor)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
