"""The Slurm backend on a real two-node Slurm cluster (:mod:`slurm_cluster`): each attempt a
job, Slurm's signals and ends as interruptions that lose nothing, a lost node, two nodes, and a
runner that is not the job (killed, it leaves the job running; the next one re-attaches).

Every test checks that nothing of its run outlives it: no job in ``squeue``, no process carrying
the run's token. The cluster is shared by the tests, in order, on one worker (an xdist group).
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
from slurm_cluster import SlurmCluster, job_processes

from cluster_processes import rank_process, token_carriers
from nodus.runner.catalog.core import Catalog
from nodus.testing.counter import expected_value
from nodus.ui.pages.run_tables import attempts_table
from polling import wait_for

pytestmark = [pytest.mark.xdist_group("slurm"), pytest.mark.slow]

PROGRAMS = Path(__file__).resolve().parents[1] / "raycluster" / "programs"
GATED_COUNTER = Path(__file__).resolve().parents[1] / "runner" / "programs" / "gated_counter.py"
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}


class Project:
    """A code folder, a home and a store on the filesystem both nodes share (this machine's)."""

    def __init__(self, root: Path, cluster: SlurmCluster) -> None:
        self.root = root
        self.cluster = cluster
        self.home = root / "home"
        self.code = root / "code"
        self.code.mkdir()
        self.file = self.code / "workload.toml"
        self.store = (root / "store").as_uri()
        self.log_path = str(root / "runner.log")
        self.gate = root / "done-interrupting"  # outside the code folder

    def counter(self, steps: int, sleep: float, save_every: int = 5, *extra: str) -> list[str]:
        """The counter, slow only until :meth:`done_interrupting` (``gated_counter.py``)."""
        return [
            sys.executable,
            str(GATED_COUNTER),
            str(self.gate),
            "--steps",
            str(steps),
            "--save-every",
            str(save_every),
            "--sleep",
            str(sleep),
            *extra,
        ]

    def done_interrupting(self) -> None:
        """The counter's steps left run without sleeping."""
        self.gate.touch()

    def write(self, command: list[str], execution: str = "", env: str = "") -> Project:
        self.file.write_text(
            f'name = "slurm-case"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n{env}'
            f'[execution]\nbackend = "slurm"\nshared_store = true\n{execution}'
        )
        return self

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **FAST, **self.cluster.env(), **(extra or {})}

    def args(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "nodus", *args, "--home", str(self.home)]

    def nodus(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.args(*args),
            cwd=self.code,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def run(self, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.nodus("run", str(self.file), "--store", self.store, *extra, env=env)

    def start(self, *extra: str, path: str | None = None) -> subprocess.Popen:
        """``nodus run`` in the background, its output in ``runner.log``; with ``path``, the
        ``PATH`` it finds Slurm's commands on (a wrapper ahead of one of them)."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - the runner writes it
        runner = subprocess.Popen(
            self.args("run", str(self.file), "--store", self.store, *extra),
            cwd=self.code,
            env=self.env({"PATH": path} if path else None),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        runner.log_path = self.log_path
        return runner

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def run_id(self) -> str | None:
        if not (self.home / "nodus.db").exists():
            return None
        catalog = Catalog(str(self.home))
        try:
            runs = catalog.list_runs()
            return runs[0].id if runs else None
        finally:
            catalog.close()

    def get(self) -> dict:
        proc = self.nodus("runs", "get", str(self.run_id()), "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def attempts(self) -> list[dict]:
        return self.get()["stages"][0]["attempts"]

    def events(self, kind: str) -> list[dict]:
        return [e for e in self.get()["events"] if e["type"] == kind]

    def running(self, number: int = 1) -> dict | None:
        """Attempt ``number`` once its program runs (its node's pid mirrored), else None."""
        run_id = self.run_id()
        if run_id is None:
            return None
        catalog = Catalog(str(self.home))
        try:
            rows = catalog.attempts(run_id, "main")
        finally:
            catalog.close()
        found = next((a for a in rows if a["number"] == number), None)
        return found if found and found["pid"] and found["outcome"] is None else None

    def job(self, number: int = 1) -> str:
        attempt = wait_for(lambda: self.running(number), f"attempt {number} running")
        return attempt["job"]["id"]

    def committed(self) -> list[int]:
        from nodus.store import open_store

        run_id = self.run_id()
        return [m.step for m in open_store(self.store).list(run=run_id)] if run_id else []

    def result(self) -> dict:
        from nodus.store import open_store

        store = open_store(self.store)
        (outputs,) = store.list(run=self.run_id(), role="outputs")
        return json.loads(store.read_file(outputs, "out/result.json"))

    def assert_nothing_left(self) -> None:
        """No job of the run in ``squeue``, no process carrying its token (``ps``'s view)."""
        run_id = str(self.run_id())
        assert self.cluster.jobs(run_id) == []
        assert token_carriers(run_id) == {}


@pytest.fixture
def project(tmp_path, cluster):
    return Project(tmp_path, cluster)


def _catches_sigterm(pid: int) -> bool:
    """The program set its SIGTERM handler (``--save-on-term``): a notice now makes it save."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


def _saving(project: Project, number: int) -> str:
    """Attempt ``number``'s job, once its program would save at a notice."""
    attempt = wait_for(lambda: project.running(number), f"attempt {number} running")
    wait_for(lambda: _catches_sigterm(attempt["pid"]), "the program's SIGTERM handler")
    return attempt["job"]["id"]


def _saved_at_notice(log: str) -> list[int]:
    marker = "counter: stopped by SIGTERM, saved checkpoint-"
    return [int(part.split()[0]) for part in log.split(marker)[1:]]


def test_an_attempt_is_a_job_and_runs_get_shows_its_id_nodes_and_state(project):
    project.write(project.counter(20, 0.02))
    proc = project.run()
    assert proc.returncode == 0, proc.stderr
    assert project.result()["value"] == expected_value(20)
    (attempt,) = project.attempts()
    job = attempt["job"]
    assert job["scheduler"] == "slurm" and job["state"] == "COMPLETED"
    assert job["nodes"] in ("n1", "n2")
    assert attempt["host"] == f"{job['nodes']} (slurm job {job['id']})"
    assert [e["job"] for e in project.events("slurm_job_submitted")] == [job["id"]]
    assert "counter: done at step 20" in proc.stdout + proc.stderr  # the node's output, relayed
    text = project.nodus("runs", "get", str(project.run_id())).stdout
    assert f"on {job['nodes']} (slurm job {job['id']}), COMPLETED: succeeded" in text
    page = str(attempts_table(project.get()))  # the run's page in `nodus ui`
    assert f"{job['nodes']} (slurm job {job['id']}), COMPLETED" in page
    project.assert_nothing_left()


def test_what_slurm_could_not_run_is_refused_before_it_is_accepted(project, tmp_path):
    project.write(project.counter(5, 0.0))
    project.file.write_text(project.file.read_text().replace("shared_store = true\n", ""))
    unshared = project.run()
    assert unshared.returncode == 2 and "node-local" in unshared.stderr
    assert "shared_store = true" in unshared.stderr
    project.write(project.counter(5, 0.0), execution='partition = "no-such-partition"\n')
    partition = project.run()
    assert partition.returncode == 2 and "invalid partition" in partition.stderr.lower()
    project.write(project.counter(5, 0.0), execution="gpu_count = 1\n")
    gpus = project.run()
    assert gpus.returncode == 2 and "Slurm would not run its job" in gpus.stderr
    project.write(project.counter(5, 0.0))
    (tmp_path / "elsewhere.conf").write_text(
        Path(project.cluster.conf).read_text().replace("SlurmctldPort=6817", "SlurmctldPort=9")
    )
    nowhere = project.run(env={"SLURM_CONF": str(tmp_path / "elsewhere.conf")})
    assert nowhere.returncode == 2 and "no Slurm controller answers" in nowhere.stderr
    for refused in (unshared, partition, gpus, nowhere):
        assert "Traceback" not in refused.stderr
    assert _runs(project) == []  # none was accepted


def _runs(project: Project) -> list[str]:
    if not (project.home / "nodus.db").exists():
        return []
    catalog = Catalog(str(project.home))
    try:
        return [run.id for run in catalog.list_runs()]
    finally:
        catalog.close()


def test_slurms_signal_ahead_of_the_end_saves_and_a_new_job_continues_losing_no_step(project):
    # Slurm sends the notice (`--signal=B:USR1@signal_lead`) to the job's script: as it would
    # at the lead time, `scancel --batch --signal=USR1` sends it now.
    project.write(project.counter(300, 0.05, 1000, "--save-on-term"))
    runner = project.start()
    first = _saving(project, 1)
    project.cluster.command("scancel", "--batch", "--signal=USR1", first)
    _saving(project, 2)
    project.done_interrupting()
    assert runner.wait(timeout=300) == 0, project.log()[-3000:]
    (saved,) = _saved_at_notice(project.log())
    one, two = project.attempts()
    assert one["outcome"] == "lost" and "ahead of its end" in one["detail"]
    assert two["restored_step"] == saved and two["job"]["id"] != first  # 0 steps lost
    assert f"counter: starting at step {saved}" in project.log()
    assert project.result()["value"] == expected_value(300)
    project.assert_nothing_left()


def test_a_cancelled_job_and_a_requeued_one_are_interruptions_recovered_from_the_newest(project):
    # Slurm ends a job with SIGTERM to all its processes, srun's forced kill soon after: the
    # program's save at SIGTERM may be cut off (then it is never committed), so each new job
    # starts from the newest snapshot committed before it, whichever that is.
    project.write(project.counter(400, 0.05, 5, "--save-on-term"))
    runner = project.start()
    first = _saving(project, 1)
    wait_for(lambda: project.committed(), "a first snapshot", runner)
    project.cluster.command("scancel", first)  # SIGTERM to every process of the job
    second = _saving(project, 2)
    project.cluster.command("scontrol", "requeue", second)
    third = _saving(project, 3)
    project.done_interrupting()
    assert runner.wait(timeout=300) == 0, project.log()[-3000:]
    attempts = project.attempts()
    assert [a["outcome"] for a in attempts] == ["lost", "lost", "succeeded"]
    assert all("Slurm ended the job" in a["detail"] for a in attempts[:2])
    newest = _newest_before_each_job(project.get()["events"])
    assert [a["restored_step"] for a in attempts[1:]] == newest[1:] and newest[1] > 0
    assert len({first, second, third}) == 3  # the requeued job never ran the attempt again
    assert project.result()["value"] == expected_value(400)
    project.assert_nothing_left()


def _newest_before_each_job(events: list[dict]) -> list[int | None]:
    """The step of the newest snapshot committed before each job was submitted."""
    newest, found = None, []
    for event in events:
        if event["type"] == "snapshot_committed":
            newest = max(newest or 0, event["step"])
        elif event["type"] == "slurm_job_submitted":
            found.append(newest)
    return found


def test_a_lost_node_is_an_interruption_and_the_run_recovers_on_the_other(project, cluster):
    project.write(project.counter(300, 0.05, 10))
    runner = project.start()
    wait_for(lambda: len(project.committed()) >= 2, "two committed snapshots", runner)
    job = project.job(1)
    node = cluster.job_node(job)
    cluster.lose_node(node, job)
    wait_for(lambda: project.running(2), "attempt 2 running", runner)
    project.done_interrupting()
    try:
        assert runner.wait(timeout=300) == 0, project.log()[-3000:]
    finally:
        cluster.revive(node)
    one, two = project.attempts()
    assert one["outcome"] == "lost" and f"slurm job {job} ended" in one["detail"]
    assert two["restored_step"] >= 10 and two["job"]["nodes"] != node
    assert project.events("node_lost")[0]["job"] == job
    assert project.result()["value"] == expected_value(300)
    project.assert_nothing_left()


def test_a_killed_runner_leaves_the_job_running_and_run_key_re_attaches(project, cluster):
    project.write(project.counter(200, 0.05, 10))
    runner = project.start("--key", "nightly")
    job = project.job(1)
    os.killpg(runner.pid, signal.SIGKILL)  # the login node's runner dies; the job runs on
    runner.wait()
    assert cluster.jobs(str(project.run_id())) == [job]
    again = project.start("--key", "nightly")
    wait_for(lambda: project.events("slurm_job_attached"), "the re-attach", again)
    project.done_interrupting()
    assert again.wait(timeout=300) == 0, project.log()[-3000:]
    assert f"ran as slurm job {job}: supervised again if it still runs" in project.log()
    (attempt,) = project.attempts()  # the same attempt, never a second job for it
    assert attempt["outcome"] == "succeeded" and attempt["job"]["id"] == job
    assert len(project.events("slurm_job_submitted")) == 1
    assert [e["job"] for e in project.events("slurm_job_attached")] == [job]
    assert project.result()["value"] == expected_value(200)
    project.assert_nothing_left()


def _sbatch_killing_its_caller(folder: Path, at: int) -> tuple[str, Path]:
    """A PATH on which ``sbatch`` is the real one, except that at its ``at``-th submission it
    kills its caller (the runner) the moment Slurm answered, before the job's id is written
    down; and the file that answer is left in."""
    real = shutil.which("sbatch")
    assert real is not None
    answered, count = folder / "sbatch-answered", folder / "sbatch-count"
    wrappers = folder / "bin"
    wrappers.mkdir()
    (wrappers / "sbatch").write_text(
        "#!/bin/sh\n"
        f'case "$1" in --test-only) exec {real} "$@";; esac\n'
        f'answer=$({real} "$@") || exit $?\n'
        f"echo >> {count}\n"
        f'if [ "$(wc -l < {count})" -eq {at} ]; then\n'
        f'  printf "%s\\n" "$answer" > {answered}\n'
        '  kill -KILL "$PPID"\n'
        "fi\n"
        'printf "%s\\n" "$answer"\n'
    )
    (wrappers / "sbatch").chmod(0o755)
    return f"{wrappers}{os.pathsep}{os.environ['PATH']}", answered


@pytest.mark.parametrize("submission", [1, 2], ids=["first-job", "a-recoverys-job"])
def test_a_runner_killed_as_sbatch_answers_leaves_one_job_that_run_key_finds_by_its_name(
    project, cluster, tmp_path, submission
):
    """The window between ``sbatch`` and the job's id written down, for the first attempt's job
    (the run PREPARING) and a recovery's (RECOVERING, after the first job was cancelled): the
    runner is killed the moment Slurm has the job. The next ``run --key`` finds the job by its
    name and supervises it to the end: one job for the attempt, never a second."""
    project.write(project.counter(200, 0.05, 10))
    path, answered = _sbatch_killing_its_caller(tmp_path, submission)
    first = project.start("--key", "nightly", path=path)
    if submission == 2:
        job = project.job(1)
        wait_for(lambda: project.committed(), "a first snapshot", first)
        project.cluster.command("scancel", job)
    assert first.wait(timeout=300) == -signal.SIGKILL, project.log()[-3000:]
    job = answered.read_text().split(";", 1)[0].strip()
    attempt = project.attempts()[-1]
    assert attempt["number"] == submission and attempt["job"]["id"] is None
    assert attempt["job"]["state"] == "SUBMITTING"
    assert cluster.jobs(str(project.run_id())) == [job]  # Slurm has it; nodus has only its name
    again = project.start("--key", "nightly")
    wait_for(lambda: project.events("slurm_job_attached"), "the re-attach by name", again)
    project.done_interrupting()
    assert again.wait(timeout=300) == 0, project.log()[-3000:]
    attempts = project.attempts()  # the same attempt: no second job was submitted for it
    assert len(attempts) == submission and attempts[-1]["outcome"] == "succeeded"
    assert attempts[-1]["job"]["id"] == job
    assert len(project.events("slurm_job_submitted")) == submission - 1  # the killed one unsaid
    assert [e["job"] for e in project.events("slurm_job_attached")] == [job]
    assert project.result()["value"] == expected_value(200)
    project.assert_nothing_left()


def _slurm_that_forgot(folder: Path, job: str) -> str:
    """A PATH on which Slurm no longer knows the ended ``job``, as once ``MinJobAge`` passed
    (300 s by default): ``squeue`` finds no job by name, ``scontrol show job`` calls its id
    invalid. Everything else is the real commands'."""
    squeue, scontrol = shutil.which("squeue"), shutil.which("scontrol")
    assert squeue is not None and scontrol is not None
    wrappers = folder / "forgetful"
    wrappers.mkdir()
    (wrappers / "squeue").write_text(
        f'#!/bin/sh\ncase "$*" in *--name=*) exit 0;; esac\nexec {squeue} "$@"\n'
    )
    (wrappers / "scontrol").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = show ] && [ "$2" = job ] && [ "$4" = "{job}" ]; then\n'
        '  echo "slurm_load_jobs error: Invalid job id specified" >&2\n'
        "  exit 1\n"
        "fi\n"
        f'exec {scontrol} "$@"\n'
    )
    for wrapper in wrappers.iterdir():
        wrapper.chmod(0o755)
    return f"{wrappers}{os.pathsep}{os.environ['PATH']}"


def test_a_job_known_by_name_only_and_forgotten_by_slurm_is_found_by_its_output(
    project, cluster, tmp_path
):
    """The runner killed the moment ``sbatch`` answered (the job's name recorded, not its id);
    the job runs to its end, and Slurm forgets it before the next ``run --key`` (cron comes back
    the next day). The job's output file in the attempt's folder names it: the attempt is taken
    as it ended, never run again in a second job."""
    project.write(project.counter(200, 0.05, 10))
    path, answered = _sbatch_killing_its_caller(tmp_path, 1)
    first = project.start("--key", "nightly", path=path)
    assert first.wait(timeout=300) == -signal.SIGKILL, project.log()[-3000:]
    job = answered.read_text().split(";", 1)[0].strip()
    assert project.attempts()[0]["job"]["id"] is None
    project.done_interrupting()
    wait_for(lambda: cluster.jobs(str(project.run_id())) == [], "the job's end")
    again = project.start("--key", "nightly", path=_slurm_that_forgot(tmp_path, job))
    assert again.wait(timeout=300) == 0, project.log()[-3000:]
    attempts = project.attempts()
    assert [a["outcome"] for a in attempts] == ["succeeded"], attempts
    assert attempts[0]["job"]["id"] == job
    assert project.events("slurm_job_submitted") == []  # the killed runner's unsaid; no other
    attached = project.events("slurm_job_attached")
    assert [(e["job"], e["state"]) for e in attached] == [(job, "gone")]
    assert project.result()["value"] == expected_value(200)
    project.assert_nothing_left()


def test_a_job_that_ended_while_its_runner_was_dead_is_taken_as_it_ended(project, cluster):
    """The runner stopped (then killed) while its job ran to the end: the next ``run --key``
    takes the job's end from what it left, and the run ends as one that was never stopped."""
    project.write(project.counter(200, 0.05, 10))
    runner = project.start("--key", "nightly")
    job = project.job(1)
    os.kill(runner.pid, signal.SIGSTOP)  # the login node's runner freezes, then dies
    project.done_interrupting()
    wait_for(lambda: cluster.jobs(str(project.run_id())) == [], "the job's end")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    again = project.start("--key", "nightly")
    assert again.wait(timeout=300) == 0, project.log()[-3000:]
    attempts = project.attempts()
    assert [a["outcome"] for a in attempts] == ["succeeded"], attempts
    assert attempts[0]["job"]["id"] == job
    assert len(project.events("slurm_job_submitted")) == 1  # never a second job
    assert project.result()["value"] == expected_value(200)
    project.assert_nothing_left()


def test_runs_cancel_ends_the_job_with_its_runner_or_without_it(project, cluster):
    project.write(project.counter(100000, 0.05, 10))
    runner = project.start("--key", "one")
    job = project.job(1)
    assert project.nodus("runs", "cancel", "one").returncode == 0
    assert runner.wait(timeout=300) == 4
    assert project.attempts()[0]["job"]["state"] != "RUNNING"
    project.assert_nothing_left()

    project.file.write_text(project.file.read_text().replace("slurm-case", "slurm-two"))
    runner = project.start("--key", "two")
    two = wait_for(lambda: _run_of(project, "two"), "the second run")
    job = wait_for(lambda: _job_of(project, two), "its job running")
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()
    cancelled = project.nodus("runs", "cancel", "two")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cluster.jobs(two) == [] and job_processes(job) == []
    assert token_carriers(two) == {}


def test_a_job_still_waiting_for_nodes_is_cancelled_without_ever_running(project, cluster):
    # its output nowhere: by default Slurm writes slurm-<id>.out into the working folder
    blocker = cluster.command(
        "sbatch", "--parsable", "-N", "2", "--output", "/dev/null", "--wrap", "sleep 600"
    ).strip()
    try:
        project.write(project.counter(20, 0.05))
        runner = project.start("--key", "queued")
        run_id = wait_for(lambda: _run_of(project, "queued"), "the run", runner)
        wait_for(lambda: cluster.jobs(run_id), "its job in the queue", runner)
        assert project.attempts()[0]["job"]["state"] == "PENDING"
        assert project.nodus("runs", "cancel", "queued").returncode == 0
        assert runner.wait(timeout=120) == 4, project.log()[-3000:]
    finally:
        cluster.command("scancel", blocker)
    (attempt,) = project.attempts()
    assert attempt["outcome"] == "cancelled" and "before its job started" in attempt["detail"]
    assert attempt["pid"] is None  # its program never ran
    project.assert_nothing_left()


def _run_of(project: Project, key: str) -> str | None:
    catalog = Catalog(str(project.home))
    try:
        run = catalog.find_by_key(key)
        return run.id if run else None
    finally:
        catalog.close()


def _job_of(project: Project, run_id: str) -> str | None:
    catalog = Catalog(str(project.home))
    try:
        rows = catalog.attempts(run_id, "main")
    finally:
        catalog.close()
    return rows[0]["job"]["id"] if rows and rows[0]["pid"] else None


def test_a_pause_at_a_save_reaches_the_job_and_resume_continues_in_a_new_one(project):
    project.write(project.counter(300, 0.05, 1000, "--save-on-term"))
    runner = project.start()
    first = _saving(project, 1)
    paused = project.nodus("runs", "pause", str(project.run_id()), "--checkpoint", "save")
    assert paused.returncode == 0, paused.stderr
    assert runner.wait(timeout=300) == 3, project.log()[-3000:]
    (saved,) = _saved_at_notice(project.log())  # the program on the node got the save request
    view = project.get()
    assert view["phase"] == "PAUSED"
    assert (view["pause"]["state"], view["pause"]["save"]["step"]) == ("paused", saved)
    project.assert_nothing_left()
    project.done_interrupting()
    resumed = project.nodus("runs", "resume", str(project.run_id()))
    assert resumed.returncode == 0, resumed.stderr
    one, two = project.attempts()
    assert one["outcome"] == "paused" and two["restored_step"] == saved
    assert two["job"]["id"] != first
    assert project.result()["value"] == expected_value(300)
    project.assert_nothing_left()


def test_a_notice_to_the_runner_saves_on_the_nodes_and_resume_continues_in_a_new_job(project):
    project.write(project.counter(300, 0.05, 1000, "--save-on-term"))
    runner = project.start()
    _saving(project, 1)
    os.killpg(runner.pid, signal.SIGTERM)  # the login node reboots: a preemption notice
    assert runner.wait(timeout=300) == 3
    (saved,) = _saved_at_notice(project.log())
    assert project.get()["phase"] == "INTERRUPTED"
    project.assert_nothing_left()
    project.done_interrupting()
    resumed = project.nodus("runs", "resume", str(project.run_id()))
    assert resumed.returncode == 0, resumed.stderr
    one, two = project.attempts()
    assert one["outcome"] == "preempted" and two["restored_step"] == saved
    assert project.result()["value"] == expected_value(300)
    project.assert_nothing_left()


def test_a_two_node_world_with_a_rank_killed_resumes_bit_identical(project):
    # torchrun on each node (through srun) joins the world from the rendezvous nodus gives
    shutil.copy(PROGRAMS / "ddp_counter.py", project.code)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    project.write(
        [torchrun, "--nproc_per_node", "1", "ddp_counter.py", "60", "5", "0.1"],
        execution="nodes = 2\n",
        env='env = { GLOO_SOCKET_IFNAME = "lo" }\n',
    )
    runner = project.start()
    wait_for(lambda: len(project.committed()) >= 2, "two committed snapshots", runner)
    os.kill(rank_process("ddp_counter.py", 1), signal.SIGKILL)
    assert runner.wait(timeout=300) == 0, project.log()[-3000:]
    sys.path.insert(0, str(PROGRAMS))
    from ddp_counter import expected

    assert project.result() == {"steps": 60, "value": expected(60, 2), "world": 2}
    one, two = project.attempts()
    assert one["outcome"] == "lost" and "rank 1" in one["detail"]
    assert two["restored_step"] >= 10 and two["job"]["nodes"] == "n[1-2]"
    for rank in (0, 1):  # the same snapshot laid out on both nodes
        assert f"rank {rank}/2: starting at step {two['restored_step']}" in project.log()
    project.assert_nothing_left()
