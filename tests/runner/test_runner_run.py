"""`nodus run` end to end: acceptance, attempts, output, classification, the commands around it."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from runner_helpers import Project

from nodus.runner.workspace.layout import TMPDIR_MAX
from nodus.testing.counter import expected_value

ENV_PROBE = textwrap.dedent("""
    import json, os, sys
    keys = ["NODUS_CHECKPOINT_DIR", "NODUS_CONTROL_DIR", "NODUS_RUN_ID", "NODUS_STAGE",
            "NODUS_ATTEMPT", "TMPDIR", "HF_HOME", "XDG_CACHE_HOME", "PIP_CACHE_DIR",
            "GREETING", "PYTHONPATH"]
    seen = {k: os.environ.get(k) for k in keys}
    seen["cwd"] = os.getcwd()
    seen["runtime_exists"] = os.path.isdir(os.path.join(os.environ["TMPDIR"], "runtime"))
    seen["state_exists"] = os.path.isdir(os.environ["NODUS_CHECKPOINT_DIR"])
    seen["files"] = sorted(os.listdir("."))
    private = os.environ["NODUS_CONTROL_DIR"]
    path = os.path.join(private, "integration.json")
    seen["integration"] = json.load(open(path)) if os.path.exists(path) else None
    os.makedirs("out", exist_ok=True)
    json.dump(seen, open("out/env.json", "w"))
    print("probe done")
""")


def test_a_run_succeeds_streams_prefixed_output_and_keeps_its_log(project):
    project.write(steps=30, save_every=10)
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 0, proc.stderr
    assert "[main] counter: done at step 30" in proc.stdout
    run_id = proc.stderr.split("accepted ")[1].split()[0]
    assert project.result(run_id) == {"steps": 30, "value": expected_value(30)}
    logs = project.nodus("runs", "logs", run_id)
    assert "==> main, attempt 1 <==" in logs.stdout
    assert "counter: done at step 30" in logs.stdout and "[main]" not in logs.stdout


def test_runs_get_json_has_the_documented_shape(project):
    project.write(steps=5, save_every=5)
    proc = project.nodus("run", "workload.toml", "--json", "--key", "shape")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # stage output went to stderr, stdout is JSON only
    assert {"id", "key", "name", "phase", "exit_status", "stages", "events"} <= set(data)
    assert (data["key"], data["name"], data["phase"], data["exit_status"]) == (
        "shape",
        "counter",
        "SUCCEEDED",
        0,
    )
    stage = data["stages"][0]
    assert stage["name"] == "main" and stage["phase"] == "SUCCEEDED"
    assert [a["outcome"] for a in stage["attempts"]] == ["succeeded"]
    types = [e["type"] for e in data["events"]]
    assert {"accepted", "source_captured", "snapshot_committed", "outputs_committed"} <= set(types)
    assert all("at" in e for e in data["events"])
    listed = json.loads(project.nodus("runs", "list", "--json").stdout)
    assert [r["id"] for r in listed] == [data["id"]]
    assert project.get("shape")["id"] == data["id"]


def test_the_program_gets_its_private_environment_and_integration_settings(project):
    (project.root / "probe.py").write_text(ENV_PROBE)
    (project.root / ".nodusignore").write_text("# build output\nscratch\n")
    (project.root / "scratch").mkdir()
    (project.root / "scratch" / "big.bin").write_text("x")
    (project.root / ".git").mkdir()
    (project.root / ".git" / "HEAD").write_text("ref")
    project.write(
        command=[sys.executable, "probe.py"],
        body=textwrap.dedent("""
        integration = "hf-trainer-v1"
        env = { GREETING = "hi" }
        [execution]
        save_every = 7
    """),
    )
    proc = project.nodus("run", "workload.toml", "--key", "env")
    assert proc.returncode == 0, proc.stderr
    run_id = project.get("env")["id"]
    store = project.store()
    output = store.list(run=run_id, role="outputs")[-1]
    store.restore(output.id, str(project.root.parent / "o"))
    seen = json.loads((project.root.parent / "o" / "out" / "env.json").read_text())
    copy = seen["cwd"]
    assert copy == str(project.home / "work" / run_id / "main" / "copy")  # every attempt's
    assert seen["NODUS_CHECKPOINT_DIR"] == copy + "/state" and seen["state_exists"]
    assert seen["NODUS_CONTROL_DIR"] == copy + "/.nodus"
    assert (seen["NODUS_RUN_ID"], seen["NODUS_STAGE"], seen["NODUS_ATTEMPT"]) == (
        run_id,
        "main",
        "1",
    )
    for private in ("TMPDIR", "HF_HOME", "XDG_CACHE_HOME", "PIP_CACHE_DIR"):
        assert not seen[private].startswith(copy), private  # outside the selection
    assert seen["runtime_exists"] and seen["GREETING"] == "hi"
    assert seen["PYTHONPATH"].split(":")[0].endswith("nodus/stages/hf/inprocess/bootstrap")
    assert "scratch" not in seen["files"] and ".git" not in seen["files"]
    assert "probe.py" in seen["files"]
    assert seen["integration"]["integration"] == "hf-trainer-v1"
    assert seen["integration"]["save_every"] == 7
    assert seen["integration"]["restored_step"] is None
    assert seen["integration"]["run_id"] == run_id


def test_a_failing_program_fails_the_run_with_exit_1(project):
    project.write(steps=20, save_every=5, extra_args=("--fail-at", "8"))
    proc = project.nodus("run", "workload.toml", "--key", "fails")
    assert proc.returncode == 1
    run = project.get("fails")
    assert run["phase"] == "FAILED" and run["exit_status"] == 1
    assert "exited with status 1" in run["message"]
    assert len(run["stages"][0]["attempts"]) == 1  # a failure is never retried as a recovery


def test_a_command_not_on_the_path_is_refused_before_the_run_is_recorded(project):
    project.write(command=["no-such-trainer", "--fast"])
    proc = project.nodus("run", "workload.toml", "--key", "missing")
    assert proc.returncode == 2, proc.stderr
    assert "command 'no-such-trainer' is not found on the PATH of this `nodus run`" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert project.catalog().find_by_key("missing") is None  # nothing recorded, the key free


def test_a_command_in_the_copy_that_is_not_executable_fails_the_stage(project):
    """A command that cannot run in the copy fails the stage, saying why, in one attempt."""
    (project.root / "train.sh").write_text("#!/bin/sh\necho never\n")  # mode 0644
    project.write(command=["./train.sh"])
    proc = project.nodus("run", "workload.toml", "--key", "noexec")
    assert proc.returncode == 1
    assert "'./train.sh' cannot start: not executable" in proc.stderr
    run = project.get("noexec")
    assert len(run["stages"][0]["attempts"]) == 1


def test_a_run_whose_program_never_started_gives_its_key_to_the_corrected_workload(project):
    """From cron a slip fails the day's run before anything trained: the next `run --key`
    says so and accepts the file as it is now under the same key; the old run stays listed."""
    (project.root / "train.sh").write_text('#!/bin/sh\nexec "$@"\n')  # mode 0644: a slip
    counter = [sys.executable, "-m", "nodus.testing.counter", "--steps", "5"]
    project.write(command=["./train.sh", *counter])
    assert project.nodus("run", "workload.toml", "--key", "daily").returncode == 1
    failed = project.get("daily")["id"]
    unchanged = project.nodus("run", "workload.toml", "--key", "daily")  # nothing corrected
    assert unchanged.returncode == 1
    assert "FAILED before its program ever started" in unchanged.stderr
    assert f"`nodus runs delete {failed}` frees it now" in unchanged.stderr
    assert project.get("daily")["id"] == failed  # no second run that would fail alike
    (project.root / "train.sh").chmod(0o755)  # the fix, in the code folder
    fixed = project.nodus("run", "workload.toml", "--key", "daily")
    assert fixed.returncode == 0, fixed.stderr
    assert f"{failed} under key 'daily' FAILED before its program ever started" in fixed.stderr
    assert "the key is given to a new run" in fixed.stderr
    run = project.get("daily")
    assert run["id"] != failed and run["phase"] == "SUCCEEDED"
    assert project.result(run["id"]) == {"steps": 5, "value": expected_value(5)}
    old = project.get(failed)
    assert old["key"] is None and old["phase"] == "FAILED"
    released = [e for e in old["events"] if e["type"] == "key_released"]
    assert [(e["key"], e["run"]) for e in released] == [("daily", run["id"])]
    again = project.nodus("run", "workload.toml", "--key", "daily")  # now it is reported
    assert again.returncode == 0 and "has already finished: SUCCEEDED" in again.stderr


def test_a_refused_workload_exits_2_without_a_traceback(project):
    project.file.write_text('name = "Bad Name"\ncommand = "true"\ninterrupt_tolerance = 3\n')
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.strip()


def test_unknown_runs_are_refused_with_exit_2(project):
    project.home.mkdir()
    proc = project.nodus("runs", "get", "run_nothere")
    assert proc.returncode == 2 and "no run with id or key 'run_nothere'" in proc.stderr


def test_stages_run_in_order_and_see_the_outputs_of_earlier_stages(project):
    write = "import os; os.makedirs('out', exist_ok=True); open('out/data.txt', 'w').write('42')"
    read = (
        "import os; os.makedirs('result', exist_ok=True); "
        "open('result/seen.txt', 'w').write(open('out/data.txt').read())"
    )
    project.file.write_text(
        textwrap.dedent(f"""
        name = "two"
        [[stages]]
        name = "prep"
        command = {json.dumps([sys.executable, "-c", write])}
        outputs = ["out"]
        [[stages]]
        name = "train"
        command = {json.dumps([sys.executable, "-c", read])}
        outputs = ["result"]
    """)
    )
    proc = project.nodus("run", "workload.toml", "--key", "two")
    assert proc.returncode == 0, proc.stderr
    run = project.get("two")
    assert [s["phase"] for s in run["stages"]] == ["SUCCEEDED", "SUCCEEDED"]
    store = project.store()
    output = store.list(run=run["id"], stage="train", role="outputs")[-1]
    store.restore(output.id, str(project.root.parent / "o"))
    assert (project.root.parent / "o" / "result" / "seen.txt").read_text() == "42"


@pytest.mark.slow  # a real `nodus run`
def test_a_home_inside_the_code_folder_is_not_captured_as_source(tmp_path):
    from runner_helpers import Project

    root = tmp_path / "project"
    root.mkdir()
    project = Project(root, root / ".nodus-home")
    (root / "probe.py").write_text(ENV_PROBE)
    project.write(command=[sys.executable, "probe.py"])
    assert project.nodus("run", "workload.toml", "--key", "inside").returncode == 0
    store = project.store()
    source = store.get(project.get("inside")["stages"][0]["source_snapshot"])
    assert sorted(entry.path for entry in source.files) == ["probe.py", "workload.toml"]


SOCKET_PROBE = textwrap.dedent("""
    import os
    from multiprocessing.connection import Listener
    # Where DataLoader workers' sockets go: $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX
    with Listener(family="AF_UNIX") as listener:
        print(f"listening at {listener.address} ({len(os.environ['TMPDIR'])} byte TMPDIR)")
""")


@pytest.mark.slow  # a real `nodus run`
def test_a_long_nodus_home_still_gives_programs_a_tmpdir_short_enough_for_sockets(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    project = Project(root, tmp_path / ("a-home-folder-with-a-long-name-" * 4))
    (root / "probe.py").write_text(SOCKET_PROBE)
    project.write(command=[sys.executable, "probe.py"])
    proc = project.nodus("run", "workload.toml", "--key", "long")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "listening at" in proc.stdout
    tmpdir = proc.stdout.split("(")[-1].split()[0]
    assert int(tmpdir) <= TMPDIR_MAX
