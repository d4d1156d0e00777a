"""The Ray backend on a real local cluster: run inside a private network namespace only.

:mod:`test_ray_backend` runs this module under ``unshare --net --pid`` with only loopback up;
the cluster (a head and a worker node started with ``ray start --address``), the S3 server and
every ``nodus`` process live in that namespace and end with it. The cluster is shared by the
cases, in order: a worker node killed by one case is replaced by a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cluster import ADDRESS, LocalCluster, in_private_namespace

from cluster_processes import rank_process, token_carriers
from nodus.runner.catalog.core import Catalog
from nodus.testing.counter import expected_value
from polling import wait_for

PROGRAMS = Path(__file__).with_name("programs")
SRC = str(Path(__file__).resolve().parents[2] / "src")
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}
# A secret only the nodes' environment holds (docs/security.md): never the runner's.
NODE_SECRET = f"ray-node-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def cluster(s3_endpoint, tmp_path_factory):
    assert in_private_namespace(), "run through test_ray_backend.py: it gives a private network"
    node_homes = tmp_path_factory.mktemp("node-homes")
    # The nodes' own environment: how they reach the store, and this checkout's nodus.
    env = {name: os.environ[name] for name in os.environ if name.startswith("AWS_")}
    env.update(PYTHONPATH=SRC, NODUS_NODE_HOME=str(node_homes), RAYNODE_TOKEN=NODE_SECRET)
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
        """The project's one run, as `nodus runs get --json` shows it."""
        return json.loads(self.nodus_json("runs", "get", self.run_id()))

    def run_id(self) -> str:
        """The project's one run (read from the catalog: one `nodus` start less per look)."""
        catalog = Catalog(str(self.home))
        try:
            (run,) = catalog.list_runs()
            return run.id
        finally:
            catalog.close()

    def nodus_json(self, *args: str) -> str:
        proc = self.nodus(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def nodus(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.args(*args), env=self.env(), capture_output=True, text=True, timeout=300
        )

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

        store = open_store(self.store)
        (outputs,) = store.list(run=self.run_id(), role="outputs")
        return json.loads(store.read_file(outputs, "out/result.json"))

    def steps(self) -> list[int]:
        """Steps of the run's committed snapshots in the store, oldest first."""
        from nodus.store import open_store

        return [m.step for m in open_store(self.store).list(run=self.run_id())]


def counter(steps: int, sleep: float, save_every: int = 5, *extra: str) -> list[str]:
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
        *extra,
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
    assert first["outcome"] == "lost" and "was lost" in first["detail"]
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
    os.kill(rank_process("ddp_counter.py", 1), signal.SIGKILL)
    assert runner.wait(timeout=300) == 0, Path(runner.log_path).read_text()[-3000:]
    sys.path.insert(0, str(PROGRAMS))
    from ddp_counter import expected

    assert project.result() == {"steps": 60, "value": expected(60, 2), "world": 2}
    first, second = project.get()["stages"][0]["attempts"]
    assert first["outcome"] == "lost" and "rank 1" in first["detail"]
    assert second["restored_step"] >= 10 and second["host"].count("ray node") == 2
    log = Path(runner.log_path).read_text()
    for rank in (0, 1):  # the same snapshot laid out on both nodes
        assert f"rank {rank}/2: starting at step {second['restored_step']}" in log
    assert _snapshot_ranks(project) == {0}  # only node 0 captured


def _snapshot_ranks(project: Project) -> set[int]:
    from nodus.store import open_store

    store = open_store(project.store)
    ranks = set()
    for manifest in store.list(run=project.run_id()):
        for entry in manifest.held_files():  # rotation took the older ones' state
            if entry.path.endswith("/state.json"):
                ranks.add(json.loads(store.read_file(manifest, entry.path))["rank"])
    assert ranks, "no snapshot holds a checkpoint"
    return ranks


def test_pause_at_a_save_reaches_the_node_and_resume_continues_on_the_cluster(cluster, project):
    # 6 s of training: the pause lands mid-run even on a loaded machine
    project.write(counter(60, 0.1, 5, "--save-on-term"))
    runner = project.start()
    wait_for(lambda: project.committed() >= 1, "a committed snapshot", runner)
    run_id = project.run_id()
    paused = project.nodus("runs", "pause", run_id, "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=120) == 3, Path(runner.log_path).read_text()[-3000:]

    saved = _saved_on_sigterm(runner)  # the program on the node got the save request
    view = project.get()
    assert view["phase"] == "PAUSED" and view["exit_status"] == 3
    assert (view["pause"]["state"], view["pause"]["save"]["step"]) == ("paused", saved)
    assert project.steps()[-1] == saved
    resumed = project.nodus("runs", "resume", run_id, "--ray-address", ADDRESS)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert project.result() == {"steps": 60, "value": expected_value(60)}  # as uninterrupted
    first, second = project.get()["stages"][0]["attempts"]
    assert first["outcome"] == "paused" and second["outcome"] == "succeeded"
    assert second["restored_step"] == saved and "ray node" in second["host"]


def test_cancel_reaches_the_node_and_leaves_no_process_of_the_attempt(cluster, project):
    project.write(counter(600, 0.1))
    runner = project.start()
    wait_for(lambda: project.committed() >= 1, "a committed snapshot", runner)
    run_id = project.run_id()
    program = _program_pid(project, run_id)
    assert token_carriers(run_id), "the program on the node carries no attempt token"
    cancelled = project.nodus("runs", "cancel", run_id)
    assert cancelled.returncode == 0 and "CANCELLED" in cancelled.stdout, cancelled.stderr
    assert runner.wait(timeout=120) == 4, Path(runner.log_path).read_text()[-3000:]
    assert token_carriers(run_id) == {}  # the program's whole tree on the node ended
    assert not _alive(program)
    view = project.get()
    assert view["phase"] == "CANCELLED" and view["exit_status"] == 4
    assert view["stages"][0]["attempts"][0]["outcome"] == "cancelled"


def test_a_preemption_notice_reaches_the_node_program_which_saves(cluster, project):
    project.write(counter(600, 0.1, 5, "--save-on-term"))
    runner = project.start()
    wait_for(lambda: project.committed() >= 1, "a committed snapshot", runner)
    run_id = project.run_id()
    runner.send_signal(signal.SIGTERM)  # the notice, to `nodus run` as for a local run
    assert runner.wait(timeout=120) == 3, Path(runner.log_path).read_text()[-3000:]

    saved = _saved_on_sigterm(runner)
    view = project.get()
    assert view["phase"] == "INTERRUPTED" and "preemption notice" in view["message"]
    (attempt,) = view["stages"][0]["attempts"]
    assert attempt["outcome"] == "preempted" and project.steps()[-1] == saved
    assert token_carriers(run_id) == {}


def _saved_on_sigterm(runner: subprocess.Popen) -> int:
    """The step the counter saved when SIGTERM reached it (its output, relayed to the runner)."""
    marker = "counter: stopped by SIGTERM, saved checkpoint-"
    log = Path(runner.log_path).read_text()
    assert marker in log, f"the program never got SIGTERM:\n{log[-3000:]}"
    return int(log.split(marker, 1)[1].split()[0])


def _program_pid(project: Project, run_id: str) -> int:
    """The pid of the attempt's program on its node, as the runner's catalog recorded it."""
    catalog = Catalog(str(project.home))
    try:
        return catalog.attempts(run_id, "main")[0]["pid"]
    finally:
        catalog.close()


def _alive(pid: int) -> bool:
    """True for a living process (a zombie is dead for this purpose)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


SECRET_PROGRAM = """\
import hashlib, os
os.makedirs("out", exist_ok=True)
with open("out/digest.txt", "w") as handle:
    handle.write(hashlib.sha256(os.environ["RAYNODE_TOKEN"].encode()).hexdigest())
"""


def test_a_secret_is_read_from_the_nodes_environment_and_stored_nowhere(cluster, project):
    import s3fs

    from nodus.store import open_store

    (project.code / "prog.py").write_text(SECRET_PROGRAM)
    project.write([sys.executable, "prog.py"], env='secrets = ["RAYNODE_TOKEN"]\n')
    assert "RAYNODE_TOKEN" not in project.env()  # the runner has none: the node's is used
    proc = project.run("--ray-address", ADDRESS)
    assert proc.returncode == 0, proc.stderr
    store = open_store(project.store)
    (outputs,) = store.list(run=project.run_id(), role="outputs")
    digest = store.read_file(outputs, "out/digest.txt").decode()
    assert digest == hashlib.sha256(NODE_SECRET.encode()).hexdigest()
    value = NODE_SECRET.encode()
    for root in (project.home, Path(cluster.env["NODUS_NODE_HOME"])):
        for folder, _dirs, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if path.is_file() and not path.is_symlink():
                    assert value not in path.read_bytes(), path
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    bucket = project.store[len("s3://") :].split("/")[0]
    keys = fs.find(bucket)
    assert keys and not [key for key in keys if value in fs.cat_file(key)]
