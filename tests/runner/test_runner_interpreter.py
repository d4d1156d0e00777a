"""The same interpreter whoever starts it: the executable found at acceptance runs every attempt.

The venv is the one running these tests (``sys.executable``'s folder; CI: the clone's .venv).
Commands under ``env -i`` get PYTHONPATH explicitly, so they import the code under test.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from runner_helpers import Project, committed_steps, kill_program, pid_alive, running_attempt

import nodus
from nodus.runner.catalog import core as catalog_module
from nodus.testing.counter import expected_value
from polling import wait_for

# Outside the quick tier: real `nodus run`s under other interpreters and minimal environments.
pytestmark = pytest.mark.slow

VENV_BIN = Path(sys.executable).parent
SRC = str(Path(nodus.__file__).resolve().parents[1])
CRON_PATH = "/usr/bin:/bin"
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "recovery.md"
STEPS, SAVE_EVERY, SLEEP = 200, 10, 0.02
CRON_STEPS = 300  # snapshots settle in 1 s there (no NODUS_SETTLE_S): two kills must land


def counter(steps: int = STEPS) -> list[str]:
    """The counter as a user writes it: a bare `python`, found on whatever PATH accepts it."""
    options = {"--steps": steps, "--save-every": SAVE_EVERY, "--sleep": SLEEP}
    return ["python", "-m", "nodus.testing.counter", *(f"{k}={v}" for k, v in options.items())]


def venv_first() -> dict:
    """A shell with the venv active."""
    return {"PATH": f"{VENV_BIN}:{CRON_PATH}"}


def executable(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(script).lstrip())
    path.chmod(0o755)
    return path


def shim_python(tmp_path: Path) -> dict:
    """A PATH whose first `python` is a stranger: it prints a marker and fails."""
    executable(tmp_path / "shim", "python", '#!/bin/sh\necho "SHIM python ran"\nexit 1\n')
    return {"PATH": f"{tmp_path / 'shim'}:{CRON_PATH}"}


def interpreters_in_logs(project: Project, run_id: str) -> list[str]:
    """The interpreter each attempt's counter says it ran under."""
    logs = project.nodus("runs", "logs", run_id).stdout
    assert "SHIM python ran" not in logs
    return [
        line.split("(python ")[1].rstrip(")") for line in logs.splitlines() if "(python " in line
    ]


def test_the_executable_is_found_at_acceptance_and_shown_by_runs_get(project):
    project.write(command=counter(steps=20))
    proc = project.nodus("run", "workload.toml", "--key", "found", env=venv_first())
    assert proc.returncode == 0, proc.stderr
    run = project.get("found")
    assert run["stages"][0]["launch"] == {
        "command": "python",
        "executable": str(VENV_BIN / "python"),
        "path": venv_first()["PATH"],
        "python": sys.version,
    }
    assert interpreters_in_logs(project, run["id"]) == [str(VENV_BIN / "python")]
    shown = project.nodus("runs", "get", "found").stdout
    assert f"runs {VENV_BIN / 'python'} (Python {sys.version.split()[0]})" in shown


def test_a_stage_path_wins_and_a_relative_command_is_kept_for_the_working_copy(project, tmp_path):
    tools = tmp_path / "tools"
    executable(tools, "hello", "#!/bin/sh\necho hello\n")
    executable(project.root, "run.sh", "#!/bin/sh\necho relative\n")
    stage_path = f"{tools}:{CRON_PATH}"
    project.file.write_text(
        textwrap.dedent(f"""
        name = "paths"
        [[stages]]
        name = "hello"
        command = ["hello"]
        env = {{ PATH = "{stage_path}" }}
        [[stages]]
        name = "relative"
        command = ["./run.sh"]
    """)
    )
    proc = project.nodus("run", "workload.toml", "--key", "p", env=venv_first())
    assert proc.returncode == 0, proc.stderr
    hello, relative = project.get("p")["stages"]
    assert hello["launch"] == {
        "command": "hello",
        "executable": str(tools / "hello"),
        "path": stage_path,
        "python": None,
    }
    assert relative["launch"]["executable"] == "./run.sh"
    assert relative["launch"]["path"] == venv_first()["PATH"]


def test_attempts_run_the_stored_interpreter_whatever_path_the_runner_has(project, tmp_path):
    project.write(command=counter())
    runner = project.start("run", "workload.toml", "--key", "k", env=venv_first())
    run_id = wait_for(lambda: project.catalog().find_by_key("k"), what="the run").id
    wait_for(lambda: committed_steps(project, run_id), what="a first snapshot")
    program = running_attempt(project.catalog(), run_id)["pid"]
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    wait_for(lambda: not pid_alive(program), timeout=10, what="the program to die with it")
    again = project.nodus("run", "workload.toml", "--key", "k", env=shim_python(tmp_path))
    assert again.returncode == 0, again.stderr
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    assert interpreters_in_logs(project, run_id) == [str(VENV_BIN / "python")] * 2


def test_a_detached_resume_runs_the_stored_interpreter_too(project, tmp_path):
    project.write(command=counter(), body="[continuity]\nresume_on_interruption = false\n")
    runner = project.start("run", "workload.toml", "--key", "r", env=venv_first())
    run_id = wait_for(lambda: project.catalog().find_by_key("r"), what="the run").id
    kill_program(project, run_id, after_step=0)
    assert runner.wait(timeout=60) == 3
    resumed = project.nodus("runs", "resume", run_id, "--detach", env=shim_python(tmp_path))
    assert resumed.returncode == 0, resumed.stderr
    second = lambda: len(project.catalog().attempts(run_id, "main")) == 2  # noqa: E731
    wait_for(second, what="the detached runner's attempt")
    assert project.nodus("runs", "wait", run_id, "--exit-status").returncode == 0
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    assert interpreters_in_logs(project, run_id) == [str(VENV_BIN / "python")] * 2


def test_a_stored_interpreter_that_is_gone_fails_the_attempt_naming_it(project, tmp_path):
    python = tmp_path / "gone" / "python"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    two_stages(project, f"import os; os.remove({str(python)!r})", "print('never')")
    proc = project.nodus("run", "workload.toml", "--key", "g", env={"PATH": f"{python.parent}"})
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"command 'python' was {python} when the run was accepted" in proc.stderr
    run = project.get("g")
    assert run["phase"] == "FAILED" and f"{python} is gone" in run["message"]
    assert [s["phase"] for s in run["stages"]] == ["SUCCEEDED", "FAILED"]


def test_a_changed_interpreter_version_is_recorded_and_the_run_goes_on(project, tmp_path):
    version = tmp_path / "version"
    version.write_text("3.0.0 (as accepted)")
    # An interpreter whose version can change under the run, like a base upgraded under a venv.
    python = executable(
        tmp_path / "upgraded",
        "python",
        f"""
        #!/bin/sh
        [ "$1" = "-I" ] && exec /bin/cat {version}
        exec {sys.executable} "$@"
        """,
    )
    two_stages(project, f"open({str(version)!r}, 'w').write('3.0.1 (upgraded)')", "print('ran')")
    proc = project.nodus(
        "run", "workload.toml", "--key", "v", env={"PATH": f"{python.parent}:{CRON_PATH}"}
    )
    assert proc.returncode == 0, proc.stderr
    run = project.get("v")
    assert run["stages"][0]["launch"]["python"] == "3.0.0 (as accepted)"
    changed = [e for e in run["events"] if e["type"] == "interpreter_changed"]
    assert [(e["stage"], e["accepted"], e["now"]) for e in changed] == [
        ("second", "3.0.0 (as accepted)", "3.0.1 (upgraded)")
    ]


def test_a_command_not_on_crons_path_is_refused_naming_the_path_and_spends_no_key(project):
    """`python` missing from cron's PATH is refused at acceptance (exit 2, the PATH and the
    fix named) before anything is recorded, so the corrected call takes the same key."""
    project.write(command=["python", "-m", "nodus.testing.counter", "--steps", "3"])
    proc = project.nodus("run", "workload.toml", "--key", "nf", env={"PATH": "/nonexistent"})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "command 'python' is not found on the PATH of this `nodus run`" in proc.stderr
    assert "/nonexistent" in proc.stderr and "set PATH in the crontab" in proc.stderr
    assert project.catalog().find_by_key("nf") is None
    fixed = project.nodus("run", "workload.toml", "--key", "nf", env=venv_first())
    assert fixed.returncode == 0, fixed.stderr
    assert project.get("nf")["phase"] == "SUCCEEDED"


def test_runs_accepted_before_launches_were_stored_keep_working(project):
    """A catalog of schema version 2 (no launch column) is migrated; its runs show no launch."""
    project.home.mkdir()
    db = sqlite3.connect(project.home / "nodus.db", isolation_level=None)
    for version in (1, 2):
        for statement in catalog_module._MIGRATIONS[version]:
            db.execute(statement)
    db.execute("PRAGMA user_version = 2")
    db.execute(
        "INSERT INTO runs (id, name, workload, store, lock_name, phase, created_at, updated_at)"
        " VALUES ('run_old', 'old', '{}', 'memory://', 'l', 'SUCCEEDED', 'then', 'then')"
    )
    db.execute("INSERT INTO stages (run_id, idx, name, phase) VALUES ('run_old', 0, 'main', 'X')")
    db.close()
    run = project.get("run_old")
    assert run["stages"][0]["launch"] is None
    assert project.catalog().get_run("run_old").launch is None


def test_the_documented_cron_and_systemd_jobs_work_in_their_minimal_environments(tmp_path):
    """docs/recovery.md's jobs as cron and systemd start them: a run accepted from a shell with
    the venv active is recovered by the systemd unit, then by the crontab line under cron's bare
    PATH (a recovery needs nothing from it); the crontab as documented accepts a new run."""
    nodus_cli = VENV_BIN / "nodus"
    if not nodus_cli.exists():
        pytest.skip(f"no `nodus` console script in {VENV_BIN}: nodus is not installed there")
    root = tmp_path / "train"
    root.mkdir()

    def job(home: Path, argv: list[str], env: dict) -> list[str]:
        """``argv`` under ``env -i``: only HOME, the job's own variables and PYTHONPATH (dev)."""
        env = {"HOME": str(home), "PYTHONPATH": SRC, **env}
        moved = [f"{name}={value}" for name, value in env.items()] + argv
        return ["env", "-i", *(_moved(part, root, nodus_cli) for part in moved)]

    home = tmp_path / "home"
    project = Project(root, home / ".nodus").write(command=counter(steps=CRON_STEPS))
    today = subprocess.check_output(job(home, ["date", "+%F"], {}), text=True).strip()
    key = f"nightly-{today}"
    shell = job(home, ["nodus", "run", "workload.toml", "--key", key], venv_first())
    first = subprocess.Popen(shell, cwd=root, start_new_session=True)
    run_id = wait_for(lambda: _key_run(project, key), what="the run")
    _kill_runner_after_a_snapshot(project, run_id, first)

    unit_env, exec_start = _systemd_unit()
    unit = job(home, exec_start, {"PATH": SYSTEMD_PATH, **unit_env})
    second = subprocess.Popen(unit, cwd=root, start_new_session=True)
    wait_for(lambda: _attempt_running(project, run_id, 2, second), what="the systemd recovery")
    _kill_runner_after_a_snapshot(project, run_id, second)

    crontab_env, cron_command = _crontab()
    bare = job(home, cron_command, {"PATH": CRON_PATH})  # a crontab without its PATH line
    cron_log = home / "nodus-train.log"  # the crontab's log, outside the code folder
    assert subprocess.run(bare, timeout=300).returncode == 0, cron_log.read_text()
    assert subprocess.run(bare, timeout=300).returncode == 0  # finished: reported, not rerun
    run = project.get(run_id)
    assert run["phase"] == "SUCCEEDED" and len(run["stages"][0]["attempts"]) == 3
    assert run["stages"][0]["launch"]["executable"] == str(VENV_BIN / "python")
    assert project.result(run_id) == {"steps": CRON_STEPS, "value": expected_value(CRON_STEPS)}
    assert interpreters_in_logs(project, run_id) == [str(VENV_BIN / "python")] * 3
    assert "has already finished: SUCCEEDED" in cron_log.read_text()
    assert not (root / "nodus-train.log").exists()

    new_home = tmp_path / "new-home"  # no run under today's key yet: cron accepts one
    new_home.mkdir()  # a user's home exists; cron's line logs there
    project = Project(root, new_home / ".nodus").write(command=counter(steps=20))
    documented = job(new_home, cron_command, {"PATH": CRON_PATH, **crontab_env})
    assert subprocess.run(documented, timeout=300).returncode == 0
    accepted = project.get(key)
    assert accepted["phase"] == "SUCCEEDED"
    assert interpreters_in_logs(project, accepted["id"]) == [str(VENV_BIN / "python")]


def test_the_documented_systemd_unit_stopped_by_a_reboot_continues_at_its_next_start(tmp_path):
    """docs/recovery.md's unit as systemd runs it: stopped with SIGTERM (a reboot, `systemctl
    stop`; KillMode=mixed sends it to the runner alone), started again, interrupted once more
    with SIGINT, then the crontab's line: each call continues the day's run from its newest
    snapshot, saying so, and it ends SUCCEEDED equal to an uninterrupted run."""
    nodus_cli = VENV_BIN / "nodus"
    if not nodus_cli.exists():
        pytest.skip(f"no `nodus` console script in {VENV_BIN}: nodus is not installed there")
    root = tmp_path / "train"
    root.mkdir()
    home = tmp_path / "home"
    log = tmp_path / "journal.log"

    def job(argv: list[str], env: dict) -> subprocess.Popen:
        env = {"HOME": str(home), "PYTHONPATH": SRC, **env}
        moved = [f"{name}={value}" for name, value in env.items()] + argv
        command = ["env", "-i", *(_moved(part, root, nodus_cli) for part in moved)]
        with log.open("a") as out:  # the journal: what each start said
            return subprocess.Popen(command, cwd=root, stdout=out, stderr=out)

    project = Project(root, home / ".nodus").write(command=counter(steps=CRON_STEPS))
    unit_env, exec_start = _systemd_unit()
    assert "KillMode=mixed" in DOCS.read_text()  # SIGTERM to the runner alone, as sent here
    started = job(exec_start, {"PATH": SYSTEMD_PATH, **unit_env})
    run_id = wait_for(lambda: _today_run(project), what="the day's run")
    _stop_after_a_snapshot(project, run_id, started, signal.SIGTERM)
    stopped = project.get(run_id)
    assert stopped["phase"] == "INTERRUPTED" and stopped["exit_status"] == 3
    saved = committed_steps(project, run_id)[-1]

    again = job(exec_start, {"PATH": SYSTEMD_PATH, **unit_env})  # the next boot's start
    wait_for(lambda: _attempt_running(project, run_id, 2, again), what="the continued attempt")
    _stop_after_a_snapshot(project, run_id, again, signal.SIGINT)
    assert project.get(run_id)["phase"] == "INTERRUPTED"

    crontab_env, cron_command = _crontab()
    cron = job(cron_command, {"PATH": CRON_PATH, **crontab_env})
    assert cron.wait(timeout=300) == 0, log.read_text()[-3000:]
    run = project.get(run_id)
    assert run["phase"] == "SUCCEEDED"
    attempts = run["stages"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["preempted", "preempted", "succeeded"]
    assert attempts[1]["restored_step"] == saved and attempts[2]["restored_step"] > saved
    assert project.result(run_id) == {"steps": CRON_STEPS, "value": expected_value(CRON_STEPS)}
    said = log.read_text() + (home / "nodus-train.log").read_text()  # the unit's, then cron's
    assert said.count("was INTERRUPTED from outside") == 2, said
    assert f"stage 'main' continues from its newest snapshot (step {saved})" in said
    assert "has already finished" not in said


def _today_run(project: Project) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    runs = project.catalog().list_runs()
    return runs[0].id if runs else None


def _stop_after_a_snapshot(project: Project, run_id: str, runner, signum: int) -> None:
    """``signum`` to the runner once its attempt committed a snapshot; it stops, exit 3."""
    known = len(committed_steps(project, run_id))
    wait_for(lambda: len(committed_steps(project, run_id)) > known, what="a new snapshot")
    os.kill(runner.pid, signum)
    assert runner.wait(timeout=120) == 3


def two_stages(project: Project, first: str, second: str) -> None:
    """Two stages run by a bare `python`; the first changes what the second will find."""
    project.file.write_text(
        textwrap.dedent(f"""
        name = "two"
        [[stages]]
        name = "first"
        command = {json.dumps(["python", "-c", first])}
        [[stages]]
        name = "second"
        command = {json.dumps(["python", "-c", second])}
    """)
    )


def _key_run(project: Project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None


def _attempt_running(project: Project, run_id: str, number: int, runner) -> bool:
    """Attempt ``number`` runs; fails at once if its runner ended before that (say, not found)."""
    assert runner.poll() is None, f"the runner exited {runner.returncode} before attempt {number}"
    attempt = running_attempt(project.catalog(), run_id)
    return attempt is not None and attempt["number"] == number


def _kill_runner_after_a_snapshot(project: Project, run_id: str, runner) -> None:
    """SIGKILL the runner once its attempt committed a snapshot; its program dies with it."""
    known = len(committed_steps(project, run_id))
    wait_for(lambda: len(committed_steps(project, run_id)) > known, what="a new snapshot")
    program = wait_for(lambda: running_attempt(project.catalog(), run_id), what="the program")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    wait_for(lambda: not pid_alive(program["pid"]), timeout=10, what="the program to die")


def _moved(text: str, root: Path, nodus_cli: Path) -> str:
    """A line of the docs with /srv/train moved to the test's folder and venv."""
    return text.replace("/srv/train/.venv/bin", str(nodus_cli.parent)).replace(
        "/srv/train", str(root)
    )


def _crontab() -> tuple[dict, list[str]]:
    """The documented crontab: its variables, and its job as cron hands it to /bin/sh."""
    block = DOCS.read_text().split("```cron\n")[1].split("```")[0]
    lines = [line for line in block.splitlines() if line and not line.startswith("#")]
    env = dict(line.split("=", 1) for line in lines if "=" in line.split()[0])
    job = next(line for line in lines if "=" not in line.split()[0])
    command = job.split(None, 5)[5].replace("\\%", "%")  # cron's escape for a literal %
    return env, ["/bin/sh", "-c", command]


def _systemd_unit() -> tuple[dict, list[str]]:
    """The documented service's Environment= and ExecStart (systemd's %% unescaped)."""
    unit = DOCS.read_text().split("# /etc/systemd/system/nodus-train.service")[1]
    lines = unit.split("```")[0].splitlines()
    settings = [line.split("=", 1) for line in lines if "=" in line and not line.startswith("#")]
    env = dict(value.split("=", 1) for name, value in settings if name == "Environment")
    exec_start = next(value for name, value in settings if name == "ExecStart")
    return env, shlex.split(exec_start.replace("%%", "%"))
