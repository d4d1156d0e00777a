"""The smaller cases of issue 39.6: each a one-line message (exit 2 for the user's mistake),
never a traceback or an internal error; a run whose catalog is deleted under it stops saying so.
"""

from __future__ import annotations

import json

from runner_helpers import committed_steps

from polling import wait_for


def _one_line(proc) -> str:
    """The command's one line on stderr, checked to be no traceback nor internal error."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return lines[0]


def test_a_listing_limit_or_offset_past_any_number_is_refused_in_a_line(project):
    proc = project.nodus("runs", "list", "--limit", "99999999999999999999999")
    assert proc.returncode == 2
    assert "limit 99999999999999999999999: give a whole number from 0 to" in _one_line(proc)
    proc = project.nodus("runs", "list", "--offset", "-3", "--json")
    assert proc.returncode == 2
    assert "offset -3: give a whole number from 0" in _one_line(proc)


def test_a_settle_time_that_is_no_number_is_refused_before_a_run_is_accepted(project):
    project.write(steps=2, save_every=1)
    proc = project.nodus("run", str(project.file), env={"NODUS_SETTLE_S": "abc"})
    assert proc.returncode == 2
    assert _one_line(proc) == (
        "nodus: NODUS_SETTLE_S='abc': give a number of seconds, 0 or more (or unset it)"
    )
    listed = project.nodus("runs", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_a_key_with_control_characters_is_refused_and_an_old_one_is_printed_escaped(project):
    project.write(steps=2, save_every=1)
    proc = project.nodus("run", str(project.file), "--key", "a\x1b[31mred\x07")
    assert proc.returncode == 2
    assert "a key holds no control characters" in _one_line(proc)
    assert "\x1b" not in proc.stderr
    # One the catalog holds from before (or an adopted record's): shown, never obeyed.
    catalog = project.catalog()
    run_id = catalog.create_run(
        name="w", workload={}, store="", key="b\x1b]0;title\x07", lock_name="l", stage_names=["m"]
    )
    listed = project.nodus("runs", "list")
    assert listed.returncode == 0 and "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "b\\x1b]0;title\\x07" in listed.stdout
    shown = project.nodus("runs", "get", run_id)
    assert shown.returncode == 0 and "\x1b" not in shown.stdout
    assert "key b\\x1b]0;title\\x07" in shown.stdout


def test_logs_of_an_attempt_or_stage_the_run_lacks_are_refused_in_a_line(project):
    project.write(steps=2, save_every=1)
    proc = project.nodus("run", str(project.file), "--key", "logs")
    assert proc.returncode == 0, proc.stderr
    run_id = project.get("logs")["id"]
    proc = project.nodus("runs", "logs", "logs", "--attempt", "5")
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc) == f"nodus: run {run_id} has no attempt 5 (its attempts: 1)"
    proc = project.nodus("runs", "logs", "logs", "--stage", "nosuch")
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc) == f"nodus: run {run_id} has no stage 'nosuch' (its stages: main)"
    proc = project.nodus("runs", "logs", "logs", "--stage", "main", "--attempt", "1")
    assert proc.returncode == 0 and "counter: done at step 2" in proc.stdout


def test_a_run_whose_catalog_is_deleted_stops_saying_so_and_resumes_from_its_store(project):
    """The runner notices its catalog file is gone, stops the program (its last state
    captured), and names the command that continues the run from its store's record."""
    project.write(steps=400, save_every=5, sleep=0.05, gated=True)
    runner = project.start("run", str(project.file), "--key", "lost")
    run_id = wait_for(lambda: project.catalog().find_by_key("lost") or None, what="the run").id
    wait_for(lambda: committed_steps(project, run_id), what="a snapshot", runner=runner)
    for name in ("nodus.db", "nodus.db-wal", "nodus.db-shm"):
        (project.home / name).unlink(missing_ok=True)
    _out, err = runner.communicate(timeout=120)
    assert runner.returncode == 1, err
    assert "Traceback" not in err and "internal error" not in err
    store = f"file://{project.home / 'store'}"
    assert (
        f"nodus: the run catalog {project.home / 'nodus.db'} was deleted while run {run_id} "
        "trained; its program was stopped and its last state captured into its store, which "
        f"keeps the run's record: `nodus runs resume {run_id} --store {store}` continues it"
    ) in err
    project.done_killing()
    resumed = project.nodus("runs", "resume", run_id, "--store", store)
    assert resumed.returncode == 0, resumed.stderr
    assert project.get(run_id)["phase"] == "SUCCEEDED"
