"""The Ray backend on a real local cluster: run inside a private network namespace only.

:mod:`test_ray_backend` runs this module under ``unshare --net --pid`` with only loopback up;
the cluster (a head and a worker node started with ``ray start --address``), the S3 server and
every ``nodus`` process live in that namespace and end with it. The cluster is shared by the
cases, in order: a worker node killed by one case is replaced by a new one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cluster import ADDRESS, LocalCluster, in_private_namespace

from nodus.runner.catalog import Catalog
from nodus.testing.counter import expected_value
from polling import wait_for

PROGRAMS = Path(__file__).with_name("programs")
SRC = str(Path(__file__).resolve().parents[2] / "src")
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}


@pytest.fixture(scope="module")
def cluster(s3_endpoint, tmp_path_factory):
    assert in_private_namespace(), "run through test_ray_backend.py: it gives a private network"
    node_homes = tmp_path_factory.mktemp("node-homes")
    # The nodes' own environment: how they reach the store, and this checkout's nodus.
    env = {name: os.environ[name] for name in os.environ if name.startswith("AWS_")}
    env.update(PYTHONPATH=SRC, NODUS_NODE_HOME=str(node_homes))
    yield LocalCluster(env).start()


class Project:
    """A code folder, a home, and `nodus` pointed at the cluster and a store."""

    def __init__(self, root: Path, store: str) -> None:
        self.root = root
        self.home = root / "home"
        self.store = store
        self.code = root / "code"
        self.code.mkdir()
        self.file = self.code / "workload.toml"

    def write(self, command: list[str], execution: str = "", env: str = "") -> Project:
        self.file.write_text(
            f'name = "ray-case"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n{env}'
            f'[execution]\nbackend = "ray"\n{execution}'
        )
        return self

    def args(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "nodus", *args, "--home", str(self.home)]

    def env(self) -> dict[str, str]:
        return {**os.environ, **FAST, "PYTHONPATH": SRC}

    def run(self, *extra: str) -> subprocess.CompletedProcess:
        command = self.args("run", str(self.file), "--store", self.store, *extra)
        return subprocess.run(
            command, cwd=self.code, env=self.env(), capture_output=True, text=True, timeout=300
        )

    def start(self) -> subprocess.Popen:
        log = open(self.root / "runner.log", "wb")  # noqa: SIM115 - the runner writes it
        command = self.args("run", str(self.file), "--store", self.store, "--ray-address", ADDRESS)
        runner = subprocess.Popen(
            command, cwd=self.code, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        runner.log_path = str(self.root / "runner.log")
        return runner

    def get(self) -> dict:
        (run,) = json.loads(self.nodus_json("runs", "list"))
        return json.loads(self.nodus_json("runs", "get", run["id"]))

    def nodus_json(self, *args: str) -> str:
        proc = subprocess.run(
            self.args(*args, "--json"), env=self.env(), capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def committed(self) -> int:
        """Snapshots committed so far (the runner's catalog)."""
        if not (self.home / "nodus.db").exists():
            return 0
        catalog = Catalog(str(self.home))
        try:
            runs = catalog.list_runs()
            if not runs:
                return 0
            return sum(e["type"] == "snapshot_committed" for e in catalog.events(runs[0].id))
        finally:
            catalog.close()

    def result(self) -> dict:
        """The run's `out/result.json`, downloaded from its outputs in the store."""
        from nodus.store import open_store

        run = self.get()
        store = open_store(self.store)
        (outputs,) = store.list(run=run["id"], role="outputs")
        return json.loads(store.read_file(outputs, "out/result.json"))


def counter(steps: int, sleep: float, save_every: int = 5) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nodus.testing.counter",
        "--steps",
        str(steps),
        "--save-every",
        str(save_every),
        "--sleep",
        str(sleep),
    ]


@pytest.fixture
def project(tmp_path, s3_bucket):
    return Project(tmp_path, f"s3://{s3_bucket}/store")


def test_directory_contract_workload_runs_on_a_node(cluster, project):
    project.write(counter(20, 0.02))
    proc = project.run("--ray-address", ADDRESS)
    assert proc.returncode == 0, proc.stderr
    assert project.result()["value"] == expected_value(20)
    (attempt,) = project.get()["stages"][0]["attempts"]
    assert "ray node" in attempt["host"] and attempt["outcome"] == "succeeded"
    assert "counter: done at step 20" in proc.stderr + proc.stdout  # the node's output, relayed


def test_node_local_store_is_refused_at_submit(cluster, project, tmp_path):
    project.write(counter(5, 0.0))
    project.store = (tmp_path / "local-store").as_uri()
    proc = project.run()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "node-local" in proc.stderr and "shared_store = true" in proc.stderr
    assert not (project.home / "nodus.db").exists() or project.committed() == 0


def test_a_lost_node_is_an_interruption(cluster, project):
    # cpus = 2: only a worker node has room, so the stage lands there, not on the head.
    project.write(counter(60, 0.1), execution="cpus = 2\n")
    runner = project.start()
    wait_for(lambda: project.committed() >= 2, "two committed snapshots", runner)
    cluster.kill_worker()
    cluster.add_worker()  # the cluster replaces the lost node
    assert runner.wait(timeout=300) == 0, Path(runner.log_path).read_text()[-3000:]
    assert project.result()["value"] == expected_value(60)
    first, second = project.get()["stages"][0]["attempts"]
    assert first["outcome"] == "interrupted" and "was lost" in first["detail"]
    assert second["outcome"] == "succeeded" and second["restored_step"] >= 10
    assert first["host"] != second["host"]  # another node


def test_two_node_stage_captures_rank_0_and_recovers_both(cluster, project):
    shutil.copy(PROGRAMS / "ddp_counter.py", project.code)
    project.write(
        [sys.executable, "ddp_counter.py", "60", "5", "0.1"],
        execution="nodes = 2\n",
        env='env = { GLOO_SOCKET_IFNAME = "lo" }\n',
    )
    runner = project.start()
    wait_for(lambda: project.committed() >= 2, "two committed snapshots", runner)
    os.kill(_rank_process(1), signal.SIGKILL)
    assert runner.wait(timeout=300) == 0, Path(runner.log_path).read_text()[-3000:]
    sys.path.insert(0, str(PROGRAMS))
    from ddp_counter import expected

    assert project.result() == {"steps": 60, "value": expected(60, 2), "world": 2}
    first, second = project.get()["stages"][0]["attempts"]
    assert first["outcome"] == "interrupted" and "rank 1" in first["detail"]
    assert second["restored_step"] >= 10 and second["host"].count("ray node") == 2
    log = Path(runner.log_path).read_text()
    for rank in (0, 1):  # the same snapshot laid out on both nodes
        assert f"rank {rank}/2: starting at step {second['restored_step']}" in log
    assert _snapshot_ranks(project) == {0}  # only node 0 captured


def _rank_process(rank: int) -> int:
    """The pid of the ddp program of ``rank`` (its environment says RANK)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            command = Path(f"/proc/{name}/cmdline").read_bytes()
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ddp_counter.py" in command and f"RANK={rank}".encode() in environ:
            return int(name)
    raise AssertionError(f"no ddp program of rank {rank}")


def _snapshot_ranks(project: Project) -> set[int]:
    from nodus.store import open_store

    store = open_store(project.store)
    ranks = set()
    for manifest in store.list(run=project.get()["id"]):
        for entry in manifest.held_files():  # rotation took the older ones' state
            if entry.path.endswith("/state.json"):
                ranks.add(json.loads(store.read_file(manifest, entry.path))["rank"])
    assert ranks, "no snapshot holds a checkpoint"
    return ranks
