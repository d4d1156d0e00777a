"""hf-trainer-v1 on two Slurm nodes: one world over the nodes of a multi-node stage.

``torchrun --nproc_per_node 1`` on each node of the attempt's job (its ``PET_*`` rendezvous
options from nodus) forms one gloo world of two, node 0 holding rank 0. The program runs
prepared under ``hf-trainer-v1`` with the ``processes`` extension: rank 0 decides each save and
writes it with every rank's RNG state, and only node 0's attempt captures. One rank SIGKILLed is
an interruption of the whole world, which restarts from the same snapshot on both nodes; a
preemption notice then saves the world at one step (node 1 never signals its rank in the
middle of rank 0's collective save) and ``runs resume`` continues it on both nodes; the final
weights equal the bare 2-process world's (``torchrun --standalone --nproc_per_node 2`` on
one machine: the same world size, so the same seeds and data order).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from slurm_cluster import SlurmCluster

from cluster_processes import token_carriers
from nodus import protocol
from nodus.qualify import weights_hash
from nodus.runner.backends.node import NODE_HOME_VAR
from nodus.runner.catalog.core import Catalog
from nodus.store import open_store
from polling import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf"))
import hf_helpers
from hf_helpers import PROGRAM_ENV, PROGRAMS, bare_run_hash, quickstart_copy

pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.slow]

PROGRAM = "collators.py"
BIN = Path(sys.executable).parent
# The bare world and its settings are tests/hf/test_ext_processes.py's (its result is shared
# for the session): a world of two draws 16 examples a step, 24 steps in all, saves every 3.
BARE_LAUNCHER = (str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2")
ENV = {"COLLATOR": "default", "QUICKSTART_EPOCHS": "4"}
WRITE_DELAY = "0.5"  # paces the saves, so the kill lands between them
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}


class HfProject:
    """The quick-start under the collators program, as a 2-node Slurm stage."""

    def __init__(self, root: Path, cluster: SlurmCluster) -> None:
        self.root, self.cluster = root, cluster
        self.home = root / "home"
        self.store = (root / "store").as_uri()
        self.code = quickstart_copy(root, "code")
        (self.code / PROGRAM).write_bytes((PROGRAMS / PROGRAM).read_bytes())
        self.file = root / "workload.toml"
        workload = {
            "name": "hf-two-nodes",
            "code": "code",
            "command": [str(BIN / "torchrun"), "--nproc_per_node", "1", PROGRAM],
            "integration": protocol.INTEGRATION_HF_TRAINER_V1,
            "outputs": ["out/model"],
            # one thread per process, as torchrun gives each of a world of several on one
            # machine (the bare world's); gloo over the loopback, both nodes being this machine
            "env": {
                **PROGRAM_ENV,
                **ENV,
                "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1",
                "GLOO_SOCKET_IFNAME": "lo",
            },
            "continuity": {"mode": "checkpointed", "checkpoint_paths": ["state"]},
            "execution": {
                "backend": "slurm",
                "shared_store": True,
                "nodes": 2,
                "save_every": 3,
                "keep_recoverable": 100,
                "keep_adapters": 100,
                "max_recoveries": 10,
                "grace_period": 15,
            },
        }
        self.file.write_text(tomli_w.dumps(workload))

    def env(self) -> dict[str, str]:
        env = {**os.environ, **FAST, **self.cluster.env(), protocol.ENV_WRITE_DELAY: WRITE_DELAY}
        env[NODE_HOME_VAR] = str(self.root / "nodes")  # the node runners' homes, read below
        env.pop("NODUS_STORE", None)
        return env

    def nodus(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "nodus", *args, "--home", str(self.home)],
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def start(self) -> subprocess.Popen:
        log_path = self.root / "runner.log"
        command = ["run", str(self.file), "--store", self.store, "--home", str(self.home)]
        with open(log_path, "ab") as log:
            runner = subprocess.Popen(
                [sys.executable, "-m", "nodus", *command],
                cwd=self.root,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        runner.log_path = log_path  # type: ignore[attr-defined]  (read by wait_for on failure)
        return runner

    def run_id(self) -> str | None:
        proc = self.nodus("runs", "list", "--json")
        runs = json.loads(proc.stdout) if proc.returncode == 0 else []
        return runs[0]["id"] if runs else None

    def committed(self, run_id: str) -> list[int]:
        return [m.step for m in open_store(self.store).list(run=run_id)]

    def get(self, run_id: str) -> dict:
        proc = self.nodus("runs", "get", run_id, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def rng_files(self, run_id: str, step: int) -> set[str]:
        """The RNG state files of the snapshot of ``step``: every rank's, written by rank 0."""
        (manifest,) = [m for m in open_store(self.store).list(run=run_id) if m.step == step]
        return {Path(f.path).name for f in manifest.files if Path(f.path).name.startswith("rng_")}

    def node_attempts(self, run_id: str, rank: int) -> list[dict]:
        """The attempts node ``rank``'s runners recorded (each node attempt's own catalog)."""
        catalog = Catalog(str(self.root / "nodes" / run_id / f"rank{rank}"))
        try:
            return catalog.attempts(run_id, "main")
        finally:
            catalog.close()

    def outputs_hash(self, run_id: str) -> str:
        target = self.root / "outputs"
        proc = self.nodus("runs", "outputs", run_id, "--to", str(target))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return weights_hash(str(target / "out" / "model"))


def _trained_since_restore(log: Path, attempt: int) -> bool:
    """True once the program's log line of a training step (the Trainer's ``{'loss': …}``)
    follows the runner's line that restored ``attempt``."""
    _, restored, after = log.read_text(errors="replace").partition(f"→ attempt {attempt}\n")
    return bool(restored) and "{'loss':" in after


def _rank_program(run_id: str, rank: int, attempt: int) -> int | None:
    """The training process of global ``rank`` in ``attempt`` (torchrun's worker, not torchrun
    itself): its environment says RANK and the attempt, its command line runs the program."""
    for pid, command in token_carriers(run_id).items():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = {f"RANK={rank}".encode(), f"{protocol.ENV_ATTEMPT}={attempt}".encode()}
        runs_it = command.split()[-1:] == [PROGRAM] and "torchrun" not in command
        if runs_it and ours <= set(environ):
            return pid
    return None


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> str:
    """The bare world's final weights, trained once for the session with tests/hf's runs of
    the same program, settings and launcher (:func:`hf_helpers.once_per_session`)."""
    hf_helpers.SHARED_RESULTS = hf_helpers.shared_results_folder(tmp_path_factory)
    try:
        root = tmp_path_factory.mktemp("bare-world")
        return bare_run_hash(root, str(PROGRAMS / PROGRAM), ENV, BARE_LAUNCHER)
    finally:
        hf_helpers.SHARED_RESULTS = None


def test_a_two_node_hf_world_killed_then_noticed_resumes_bit_identical(tmp_path, bare, cluster):
    project = HfProject(tmp_path, cluster)
    runner = project.start()
    run_id = wait_for(project.run_id, "the run", runner)
    wait_for(lambda: len(project.committed(run_id)) >= 2, "two committed snapshots", runner)
    victim = wait_for(lambda: _rank_program(run_id, 1, 1), "the program of rank 1", runner)
    before = project.committed(run_id)
    os.kill(victim, signal.SIGKILL)  # the whole world is interrupted and starts again

    # attempt 2 runs on both nodes; a preemption notice then: rank 0 decides the stop save,
    # every rank takes part in it, node 0 captures it; node 1 leaves its rank to end with rank 0
    for rank in (0, 1):
        wait_for(lambda rank=rank: _rank_program(run_id, rank, 2), f"rank {rank} of attempt 2")
    # ... once it has trained a step past its restore: a notice before that saves nothing new
    log = tmp_path / "runner.log"
    wait_for(lambda: _trained_since_restore(log, 2), "a training step of attempt 2", runner)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=300) == 3, (tmp_path / "runner.log").read_text()[-3000:]
    saved = max(project.committed(run_id))
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    run = project.get(run_id)
    assert run["phase"] == "SUCCEEDED"
    one, two, three = run["stages"][0]["attempts"]
    assert one["outcome"] == "lost" and "rank 1" in one["detail"]
    assert two["restored_step"] >= before[-1] and two["outcome"] == "preempted"
    assert saved > two["restored_step"] and three["restored_step"] == saved
    assert three["outcome"] == "succeeded"
    # both nodes laid out the same snapshot in each attempt (each node attempt's own record),
    # and only node 0 captured: every commit is its attempt's (a follower's would carry its rank)
    for rank in (0, 1):
        rows = {a["number"]: a["restored_step"] for a in project.node_attempts(run_id, rank)}
        assert (rows[2], rows[3]) == (two["restored_step"], saved), rank
    commits = [e for e in run["events"] if e["type"] == "snapshot_committed"]
    assert commits and all("rank" not in e for e in commits)
    assert project.rng_files(run_id, saved) == {"rng_state_0.pth", "rng_state_1.pth"}
    assert project.outputs_hash(run_id) == bare
    assert cluster.jobs(run_id) == [] and token_carriers(run_id) == {}
