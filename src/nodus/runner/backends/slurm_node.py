"""The Slurm backend, node side: the task each node of an attempt's job runs.

``python -m nodus.runner.backends.slurm_node FOLDER`` (one task per node, through ``srun``) is
to a Slurm job what the Ray backend's agent actor is to a Ray node: it starts the node runner
(:class:`~nodus.runner.backends.node.NodeAgent`, which runs an ordinary attempt with its rank's
role) and relays between it and the runner, here through the attempt's job folder
(:mod:`.slurm`): it appends the node's news and the program's output, and follows the controls
the runner appends (a preemption notice, a cancel, a pause).

Slurm's own signals are a notice: ``USR1`` ``signal_lead`` before the job's end (to the job's
script, which leaves the ``notice`` file in the folder), ``TERM`` when the job is cancelled,
requeued or preempted (to every process of the job, before its ``KILL``). The node runner
passes it to the program as it passes the runner's (save at the next boundary, commit, stop).

A requeued job starts this task again (``SLURM_RESTART_COUNT`` > 0); it runs nothing then and
says so: the attempt ended with the job's first start, and the runner continues the run in a
new attempt (its number is the fencing token: one attempt never runs twice).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any

from nodus._atomic import create_private, write_json_atomic
from nodus.runner.backends.node import NodeAgent
from nodus.runner.backends.slurm_jobs import NOTICE_FILE
from nodus.schemas import defaults

_SLURM_NOTICES = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
# How a node attempt's end says which of Slurm's signals stopped it
_SAID: dict[int, str] = {
    signal.SIGUSR1: "Slurm signalled the job ahead of its end (its time limit or a preemption); ",
    signal.SIGTERM: "Slurm ended the job (scancel, a requeue or a preemption); ",
    signal.SIGINT: "the job was interrupted (SIGINT); ",
}
_RENDEZVOUS_S = 300.0  # how long a follower waits for rank 0's address
_NOT_THE_NODES = ("NODUS_HOME", "NODUS_STORE")  # the runner's, exported by sbatch


def main(argv: list[str]) -> int:
    folder = argv[0]
    rank = int(os.environ.get("SLURM_NODEID", "0"))
    news = os.path.join(folder, f"news-{rank}.jsonl")
    if int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0:
        _append(news, _ended("lost", "its slurm job was requeued; the runner starts a new attempt"))
        return 0
    for name in _NOT_THE_NODES:
        os.environ.pop(name, None)
    with open(os.path.join(folder, f"spec-{rank}.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    nodes = int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
    if nodes > 1:
        spec["env"].update(_rendezvous(folder, rank, nodes))
    noticed: list[int] = []

    def notice(signum: int, _frame: FrameType | None) -> None:
        noticed.append(signum)

    for signum in _SLURM_NOTICES:
        signal.signal(signum, notice)
    agent = NodeAgent()
    try:
        agent.start(spec)
        _relay(agent, folder, rank, noticed)
    finally:
        agent.stop()
    return 0


def _relay(agent: NodeAgent, folder: str, rank: int, noticed: list[int]) -> None:
    """Until the node attempt ends: the runner's controls in, the node's news out."""
    news_path = os.path.join(folder, f"news-{rank}.jsonl")
    output_path = os.path.join(folder, f"output-{rank}.log")
    controls_path = os.path.join(folder, f"controls-{rank}.jsonl")
    notice_path = os.path.join(folder, NOTICE_FILE)
    after = output_at = controls_at = 0
    passed = 0
    while True:
        if not noticed and os.path.exists(notice_path):  # Slurm's USR1 to the job's script
            noticed.append(signal.SIGUSR1)
        if len(noticed) > passed:
            passed = len(noticed)
            agent.signal(signal.SIGTERM)
        controls_at = _follow(agent, controls_path, controls_at)
        news = agent.poll(after, output_at)
        after = news.pop("last_event", after)
        output = news.pop("output")
        if output:
            output_at += len(output)
            with os.fdopen(create_private(output_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
                log.write(output)
        if news["outcome"] is not None and noticed:
            news["outcome"]["detail"] = _SAID[noticed[0]] + news["outcome"]["detail"]
        if news["events"] or news["attempt"] or news["pause"] or news["outcome"]:
            _append(news_path, news)
        if news["outcome"] is not None:
            return
        time.sleep(defaults.POLL_S)


def _follow(agent: NodeAgent, path: str, offset: int) -> int:
    """Carry out the controls the runner appended after ``offset``; the offset past them."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return offset
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode("utf-8").splitlines():
        control = json.loads(line)
        if "signal" in control:
            agent.signal(int(control["signal"]))
        else:
            agent.control(control["control"], control["args"])
    return offset + end


def _rendezvous(folder: str, rank: int, nodes: int) -> dict[str, str]:
    """The torch.distributed rendezvous: rank 0's node address and a free port there."""
    path = os.path.join(folder, "rendezvous.json")
    if rank == 0:
        from nodus.runner.backends.slurm_jobs import node_address

        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        job = os.environ.get("SLURM_JOB_ID", "")
        write_json_atomic(path, {"job": job, "addr": node_address(node), "port": port})
    deadline = time.monotonic() + _RENDEZVOUS_S
    while True:
        found = _rendezvous_of(path, os.environ.get("SLURM_JOB_ID", ""))
        if found is not None or time.monotonic() > deadline:
            break
        time.sleep(defaults.POLL_S)
    if found is None:
        raise RuntimeError(f"rank 0 of the job never wrote its address into {path}")
    return {
        "MASTER_ADDR": found["addr"],
        "MASTER_PORT": str(found["port"]),
        "WORLD_SIZE": str(nodes),
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        # the same for a `torchrun` the stage runs on each node (its options' environment form)
        "PET_NNODES": str(nodes),
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": found["addr"],
        "PET_MASTER_PORT": str(found["port"]),
    }


def _rendezvous_of(path: str, job: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            found: dict[str, Any] = json.load(handle)
    except (OSError, ValueError):
        return None
    return found if found.get("job") == job else None


def _ended(kind: str, detail: str) -> dict[str, Any]:
    return {
        "events": [],
        "attempt": None,
        "pause": None,
        "outcome": {"kind": kind, "detail": detail},
    }


def _append(path: str, news: dict[str, Any]) -> None:
    with os.fdopen(create_private(path, os.O_WRONLY | os.O_APPEND), "a") as handle:
        handle.write(json.dumps(news) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
