"""A run that starts from another run's snapshot is refused on Ray at submit, before Ray is
contacted: `nodus run` with ``resume_from``, `runs branch`, and `runs resume --backend ray` of
such a run; and a Ray run no cluster answers for. No cluster: each refused command runs in a
probe that reports whether anything of Ray was imported (nothing imported, nothing contacted).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodus.runner.catalog.core import Catalog
from polling import wait_for

NODUS = [sys.executable, "-m", "nodus"]
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}
# Publishes checkpoint-1 and ends; with HOLD set (a child run's env) it waits for SIGTERM.
HOLD = textwrap.dedent("""
    import json, os, time
    folder = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "checkpoint-1")
    if not os.path.isdir(folder):
        building = os.path.join(os.environ["TMPDIR"], "checkpoint-1")
        os.makedirs(building)
        with open(os.path.join(building, "state.json"), "w") as handle:
            json.dump({"step": 1}, handle)
        os.rename(building, folder)
    print("hold: at checkpoint-1", flush=True)
    while os.environ.get("HOLD"):
        time.sleep(0.1)
""")
PROBE = """
import sys
from nodus.cli import main
status = main(sys.argv[1:])
print(status, sorted(name for name in sys.modules if name == "ray" or name.startswith("ray.")))
"""


class Lineage:
    """A code folder and a home; `nodus` on the default store (in the home)."""

    def __init__(self, root: Path) -> None:
        self.code = root / "code"
        self.home = root / "home"
        self.code.mkdir()
        (self.code / "hold.py").write_text(HOLD)

    def workload(self, name: str, body: str = "") -> str:
        command = json.dumps([sys.executable, "hold.py"])
        (self.code / f"{name}.toml").write_text(f'name = "{name}"\ncommand = {command}\n{body}')
        return f"{name}.toml"

    def env(self) -> dict[str, str]:
        env = {**os.environ, **FAST, "NODUS_HOME": str(self.home)}
        env.pop("NODUS_STORE", None)
        return env

    def nodus(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*NODUS, *args], cwd=self.code, env=self.env(), capture_output=True, text=True
        )

    def refused(self, *args: str) -> str:
        """Run ``nodus ARGS`` in the probe: it must exit 2 without importing Ray; its stderr.
        Were Ray contacted, it would find no cluster at RAY_ADDRESS and fail at once."""
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, *args],
            cwd=self.code,
            env={**self.env(), "RAY_ADDRESS": "127.0.0.1:1"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.stdout.splitlines()[-1] == "2 []", proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        return proc.stderr

    def interrupted(self, workload: str) -> str:
        """The id of a new run of ``workload`` (one that holds), stopped INTERRUPTED."""
        before = set(self.runs())
        runner = subprocess.Popen(
            [*NODUS, "run", workload],
            cwd=self.code,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        run_id = wait_for(lambda: next((r for r in self.runs() if r not in before), None), "run")
        wait_for(lambda: self.running(run_id), "the run's program")
        runner.send_signal(signal.SIGTERM)  # a preemption notice: the run stops INTERRUPTED
        runner.communicate(timeout=120)
        assert runner.returncode == 3 and self.runs()[run_id] == "INTERRUPTED"
        return run_id

    def runs(self) -> dict[str, str]:
        """{run id: phase} of every run in the catalog."""
        catalog = Catalog(str(self.home))
        try:
            return {run.id: str(run.phase) for run in catalog.list_runs()}
        finally:
            catalog.close()

    def running(self, run_id: str) -> bool:
        catalog = Catalog(str(self.home))
        try:
            attempts = catalog.attempts(run_id, "main")
            return bool(attempts and attempts[-1]["pid"] and attempts[-1]["outcome"] is None)
        finally:
            catalog.close()


@pytest.fixture
def lineage(tmp_path) -> tuple[Lineage, str]:
    """The project and a finished parent run with a snapshot at step 1."""
    project = Lineage(tmp_path)
    parent = project.nodus("run", project.workload("parent"), "--json")
    assert parent.returncode == 0, parent.stderr
    return project, json.loads(parent.stdout)["id"]


def test_resume_from_and_branch_onto_ray_are_refused_before_ray_is_contacted(lineage):
    project, parent = lineage
    child = project.workload(
        "child",
        f'resume_from = "{parent}@1"\n[execution]\nbackend = "ray"\nshared_store = true\n',
    )
    refused = project.refused("run", child)
    assert "resume_from: starting a run from another run's snapshot" in refused
    assert "not supported yet" in refused

    branched = project.refused(
        "runs", "branch", f"{parent}@1", "--from", "full-state", "--set", "execution.backend=ray"
    )
    assert "runs branch:" in branched and "not supported yet" in branched
    assert list(project.runs()) == [parent]  # nothing accepted


def test_runs_resume_of_a_child_run_on_ray_is_refused_before_ray_is_contacted(lineage):
    project, parent = lineage
    child = project.workload("child", f'resume_from = "{parent}@1"\nenv = {{ HOLD = "1" }}\n')
    run_id = project.interrupted(child)

    refused = project.refused("runs", "resume", run_id, "--backend", "ray")
    assert "runs resume:" in refused and "not supported yet" in refused
    assert project.runs()[run_id] == "INTERRUPTED"


def test_a_ray_run_no_cluster_answers_for_is_refused_before_it_is_accepted(tmp_path):
    project = Lineage(tmp_path)
    body = '[execution]\nbackend = "ray"\nshared_store = true\n'
    refused = project.refused("run", project.workload("lonely", body))  # RAY_ADDRESS: nobody
    assert "no Ray cluster answers at 127.0.0.1:1" in refused
    for hint in ("--ray-address", "RAY_ADDRESS", "docs/cluster.md", "ray start --head"):
        assert hint in refused
    flagged = project.refused("run", "lonely.toml", "--ray-address", "127.0.0.1:2")
    assert "no Ray cluster answers at 127.0.0.1:2" in flagged
    assert project.runs() == {}  # nothing accepted, so nothing FAILED to resume
