"""Interruptions with real signals: the program killed, the runner killed or told to stop."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

from runner_helpers import catches, committed_steps, kill_program, pid_alive, running_attempt

import doc_samples
from nodus import protocol
from nodus.store.restorable import holds_training_state, newest_first
from nodus.testing.counter import expected_value
from polling import wait_for

STEPS, SAVE_EVERY, SLEEP = 400, 10, 0.01


def test_a_program_sigkilled_at_random_moments_ends_like_an_uninterrupted_run(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    runner = project.start("run", "workload.toml", "--key", "k")
    run_id = wait_for(lambda: _run_id(project, "k"), what="the run")
    rng = random.Random(4)
    kills = 0
    for _ in range(3):
        wait_for(lambda: running_attempt(project.catalog(), run_id), what="an attempt")
        # each recovery must have state to restore: on a loaded machine 0.3 s after its start
        # the first attempt may not have committed yet
        wait_for(lambda: committed_steps(project, run_id), what="a committed snapshot")
        time.sleep(rng.uniform(0.3, 0.8))
        if runner.poll() is not None:
            break
        kill_program(project, run_id)
        kills += 1
    project.done_killing()
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == 0, err
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert len(attempts) == kills + 1 and kills >= 2
    interrupted = [a for a in attempts if a["outcome"] == "lost"]
    assert all("SIGKILL, which nodus did not send" in a["detail"] for a in interrupted)
    restored = [a["restored_step"] for a in attempts[1:]]
    assert all(step is not None and step % SAVE_EVERY == 0 for step in restored)
    assert out.count("counter: starting at step 0") == 1  # every recovery restored state


def test_a_sigkilled_runner_takes_its_program_along_and_run_key_recovers(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    runner = project.start("run", "workload.toml", "--key", "cron")
    run_id = wait_for(lambda: _run_id(project, "cron"), what="the run")
    wait_for(lambda: committed_steps(project, run_id), what="a first snapshot")
    program = running_attempt(project.catalog(), run_id)["pid"]
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    wait_for(lambda: not pid_alive(program), timeout=10, what="the program to die with it")
    before = committed_steps(project, run_id)
    orphaned = project.nodus("runs", "wait", run_id)
    assert orphaned.returncode == 3
    assert "its runner is gone; `nodus run FILE --key cron` recovers it" in orphaned.stderr
    project.done_killing()
    again = project.nodus("run", "workload.toml", "--key", "cron")
    assert again.returncode == 0, again.stderr
    assert "recovering it" in again.stderr
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    run = project.get(run_id)
    attempts = run["stages"][0]["attempts"]
    assert attempts[0]["detail"] == "its runner died"
    assert attempts[1]["restored_step"] == max(before)
    assert "runner_lost" in [e["type"] for e in run["events"]]


def test_sigterm_to_the_runner_is_a_preemption_notice_then_resume_finishes(project):
    project.write(
        steps=STEPS, save_every=1000, sleep=SLEEP, extra_args=("--save-on-term",), gated=True
    )
    runner = project.start("run", "workload.toml", "--key", "pre")
    run_id = wait_for(lambda: _run_id(project, "pre"), what="the run")
    attempt = wait_for(lambda: running_attempt(project.catalog(), run_id), what="the program")
    # Its SIGTERM handler is set (a loaded machine may take seconds): the step it is in then
    # ends before it saves, so it saves a step past 0.
    wait_for(lambda: catches(attempt["pid"], signal.SIGTERM), what="its SIGTERM handler")
    os.kill(runner.pid, signal.SIGTERM)
    runner.communicate(timeout=60)
    assert runner.returncode == 3
    run = project.get(run_id)
    assert run["phase"] == "INTERRUPTED" and run["exit_status"] == 3
    assert "preemption notice" in run["message"]
    # The program saved on SIGTERM (not a multiple of save_every): the final capture has it.
    saved = committed_steps(project, run_id)
    assert saved and 0 < saved[-1] < STEPS
    wait = project.nodus("runs", "wait", run_id, "--exit-status")
    assert wait.returncode == 3
    wrong = project.nodus("runs", "resume", run_id, "--step", "99999")
    assert wrong.returncode == 2 and f"committed steps: {saved[-1]}" in wrong.stderr
    project.done_killing()
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}
    assert project.get(run_id)["stages"][0]["attempts"][1]["restored_step"] == saved[-1]


def test_restartable_recovery_starts_again_from_the_source_alone(project):
    project.write(
        steps=STEPS,
        save_every=SAVE_EVERY,
        sleep=SLEEP,
        gated=True,
        body=textwrap.dedent("""
        [continuity]
        mode = "restartable"
        resume_on_interruption = true
    """),
    )
    runner = project.start("run", "workload.toml", "--key", "r")
    run_id = wait_for(lambda: _run_id(project, "r"), what="the run")
    kill_program(project, run_id, after_step=0)
    project.done_killing()
    out, _ = runner.communicate(timeout=120)
    assert runner.returncode == 0
    attempts = project.get(run_id)["stages"][0]["attempts"]
    assert [a["restored_step"] for a in attempts] == [None, None]
    assert out.count("counter: starting at step 0") == 2
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def test_resume_false_stops_interrupted_and_resumable_by_hand(project):
    project.write(
        steps=STEPS,
        save_every=SAVE_EVERY,
        sleep=SLEEP,
        gated=True,
        body=textwrap.dedent("""
        [continuity]
        mode = "checkpointed"
        resume_on_interruption = false
    """),
    )
    runner = project.start("run", "workload.toml", "--key", "nr")
    run_id = wait_for(lambda: _run_id(project, "nr"), what="the run")
    kill_program(project, run_id, after_step=0)
    runner.communicate(timeout=60)
    assert runner.returncode == 3
    run = project.get(run_id)
    assert run["phase"] == "INTERRUPTED" and "nodus runs resume" in run["message"]
    again = project.nodus("run", "workload.toml", "--key", "nr")  # left so, as asked
    assert again.returncode == 3
    assert "resume_on_interruption = false keeps it so" in again.stderr
    assert f"`nodus runs resume {run_id}` continues it" in again.stderr
    project.done_killing()
    assert project.nodus("runs", "resume", "nr").returncode == 0
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def test_files_outside_the_selection_are_gone_after_recovery(project):
    (project.root / "train.py").write_text(
        textwrap.dedent("""
        import json, os, sys
        from nodus.testing import counter
        os.makedirs("out", exist_ok=True)
        with open("out/strays.txt", "a") as log:  # out/ is not selected either
            log.write(f"{os.path.exists('stray.txt')}\\n")
        with open("out/seen.json", "w") as seen:
            json.dump({"stray_seen": os.path.exists("stray.txt")}, seen)
        open("stray.txt", "w").write("scribbled by the program")
        sys.exit(counter.main(sys.argv[1:]))
    """)
    )
    project.write(
        command=[
            sys.executable,
            "train.py",
            "--steps",
            str(STEPS),
            "--save-every",
            str(SAVE_EVERY),
            "--sleep",
            str(SLEEP),
        ]
    )
    runner = project.start("run", "workload.toml", "--key", "sel")
    run_id = wait_for(lambda: _run_id(project, "sel"), what="the run")
    kill_program(project, run_id, after_step=0)
    runner.communicate(timeout=120)
    assert runner.returncode == 0
    store = project.store()
    output = store.list(run=run_id, role="outputs")[-1]
    store.restore(output.id, str(project.root.parent / "o"))
    out = project.root.parent / "o" / "out"
    assert out.joinpath("strays.txt").read_text() == "False\n"  # fresh copy, no old log
    assert out.joinpath("seen.json").read_text() == '{"stray_seen": false}'
    assert project.get(run_id)["stages"][0]["attempts"][1]["restored_step"] is not None


ATTEMPT_PROBE = textwrap.dedent("""
    import glob, json, os, shutil, signal
    attempt = os.environ["NODUS_ATTEMPT"]
    cache = os.environ["HF_HOME"]
    seen = {
        "cwd": os.getcwd(),
        "tmp": os.environ["TMPDIR"],
        "data_mtime_ns": os.stat("data.txt").st_mtime_ns,
        "data": open("data.txt").read(),
        "cached_before": sorted(os.path.basename(p) for p in glob.glob(f"{cache}/seen-*")),
        "stray": os.path.exists("stray.txt"),
    }
    with open(os.path.join(cache, f"seen-{attempt}.json"), "w") as handle:
        json.dump(seen, handle)
    print(f"attempt {attempt} probed", flush=True)
    if attempt == "1":
        open("stray.txt", "w").write("left in the copy by attempt 1")
        with open("data.txt", "a") as handle:  # in place: the copy's own file, not the source
            handle.write("scribbled by attempt 1\\n")
        os.kill(os.getpid(), signal.SIGKILL)  # an interruption: nodus did not send it
    os.makedirs("out", exist_ok=True)
    for path in glob.glob(f"{cache}/seen-*.json"):
        shutil.copy(path, "out")
""")


def test_every_attempt_runs_at_one_copy_path_with_the_source_mtimes_and_the_stage_cache(project):
    (project.root / "probe.py").write_text(ATTEMPT_PROBE)
    data = project.root / "data.txt"
    captured = "a data file that datasets would fingerprint by path and mtime\n"
    data.write_text(captured)
    captured_mtime = 1_600_000_000_123_456_789
    os.utime(data, ns=(captured_mtime, captured_mtime))
    project.write(
        command=[sys.executable, "probe.py"],
        body='[continuity]\nmode = "restartable"\nresume_on_interruption = true\n',
    )
    proc = project.nodus("run", "workload.toml", "--key", "same")
    assert proc.returncode == 0, proc.stderr
    run_id = project.get("same")["id"]
    store = project.store()
    store.restore(store.list(run=run_id, role="outputs")[-1].id, str(project.root.parent / "o"))
    first, second = (
        json.loads((project.root.parent / "o" / "out" / f"seen-{n}.json").read_text())
        for n in (1, 2)
    )

    assert [a["outcome"] for a in project.get(run_id)["stages"][0]["attempts"]] == [
        "lost",
        "succeeded",
    ]
    copy = str(project.home / "work" / run_id / "main" / "copy")
    assert first["cwd"] == second["cwd"] == copy
    assert first["data_mtime_ns"] == second["data_mtime_ns"] == captured_mtime
    # ... and the source as captured, not what attempt 1 did to its own copy
    assert first["data"] == second["data"] == captured
    assert second["cached_before"] == ["seen-1.json"]  # the stage's cache outlived attempt 1
    assert not second["stray"]  # ... but the copy was laid out again from the source
    assert first["tmp"] != second["tmp"] and not os.path.exists(first["tmp"])
    logs = project.nodus("runs", "logs", run_id).stdout
    one, two = logs.split("==> main, attempt 2 <==")
    assert "==> main, attempt 1 <==" in one and "attempt 1 probed" in one
    assert "attempt 2 probed" in two and "attempt 1 probed" not in two


TAMPER_PROBE = textwrap.dedent("""
    import json, os, shutil, signal, stat
    attempt = os.environ["NODUS_ATTEMPT"]
    names = ["kept.txt", "edited.txt", "forged.txt", "deleted.txt", "mode.txt", "added.txt"]

    def look(name):
        if not os.path.lexists(name):
            return None
        info = os.lstat(name)
        return {"data": open(name).read(), "mode": stat.S_IMODE(info.st_mode),
                "mtime_ns": info.st_mtime_ns, "inode": info.st_ino}

    seen = {name: look(name) for name in names}
    cache = os.environ["HF_HOME"]
    with open(os.path.join(cache, f"tamper-{attempt}.json"), "w") as handle:
        json.dump(seen, handle)
    if attempt == "1":
        with open("edited.txt", "a") as handle:  # in place
            handle.write("scribbled by attempt 1\\n")
        forged = os.stat("forged.txt")  # the same size, then its mtime set back
        with open("forged.txt", "r+") as handle:
            handle.write("X")
        os.utime("forged.txt", ns=(forged.st_atime_ns, forged.st_mtime_ns))
        os.unlink("deleted.txt")
        os.chmod("mode.txt", 0o600)
        open("added.txt", "w").write("added by attempt 1")
        os.kill(os.getpid(), signal.SIGKILL)  # an interruption: nodus did not send it
    os.makedirs("out", exist_ok=True)
    for n in (1, 2):
        shutil.copy(os.path.join(cache, f"tamper-{n}.json"), "out")
""")


def test_a_recovery_keeps_the_untouched_source_files_and_lays_out_every_changed_one(project):
    (project.root / "probe.py").write_text(TAMPER_PROBE)
    for name in ("kept.txt", "edited.txt", "forged.txt", "deleted.txt", "mode.txt"):
        project.root.joinpath(name).write_text(f"{name} as captured\n")
        project.root.joinpath(name).chmod(0o644)
    project.write(
        command=[sys.executable, "probe.py"],
        body='[continuity]\nmode = "restartable"\nresume_on_interruption = true\n',
    )
    proc = project.nodus("run", "workload.toml", "--key", "tamper")
    assert proc.returncode == 0, proc.stderr
    run_id = project.get("tamper")["id"]
    store = project.store()
    store.restore(store.list(run=run_id, role="outputs")[-1].id, str(project.root.parent / "o"))
    first, second = (
        json.loads((project.root.parent / "o" / "out" / f"tamper-{n}.json").read_text())
        for n in (1, 2)
    )

    assert [a["outcome"] for a in project.get(run_id)["stages"][0]["attempts"]] == [
        "lost",
        "succeeded",
    ]
    # Attempt 2 sees every source file as captured: edited in place, overwritten with its
    # size and mtime kept, deleted, chmod-ed, all laid out again; the added one is gone.
    assert second["added.txt"] is None
    for name in ("kept.txt", "edited.txt", "forged.txt", "deleted.txt", "mode.txt"):
        assert second[name]["data"] == f"{name} as captured\n", name
        assert second[name]["mode"] == 0o644, name
        assert second[name]["mtime_ns"] == first[name]["mtime_ns"], name
    # ... and the untouched file was kept, not written again: the same inode.
    assert second["kept.txt"]["inode"] == first["kept.txt"]["inode"]


def test_max_recoveries_bounds_the_loop_and_names_the_count(project):
    project.write(
        steps=100000, save_every=SAVE_EVERY, sleep=SLEEP, body="[execution]\nmax_recoveries = 1\n"
    )
    runner = project.start("run", "workload.toml", "--key", "max")
    run_id = wait_for(lambda: _run_id(project, "max"), what="the run")
    first = kill_program(project, run_id)
    wait_for(
        lambda: (running_attempt(project.catalog(), run_id) or {}).get("number", 0) > first,
        what="the recovered attempt",
    )
    kill_program(project, run_id)
    runner.communicate(timeout=60)
    assert runner.returncode == 1
    run = project.get(run_id)
    assert run["phase"] == "FAILED"
    assert "interrupted 2 times" in run["message"] and "max_recoveries = 1" in run["message"]


def _run_id(project, key: str) -> str | None:
    if not (project.home / "nodus.db").exists():
        return None
    run = project.catalog().find_by_key(key)
    return run.id if run else None


def test_recovery_falls_back_past_a_damaged_snapshot(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP, gated=True)
    runner = project.start("run", "workload.toml", "--key", "dmg")
    run_id = wait_for(lambda: _run_id(project, "dmg"), what="the run")
    wait_for(lambda: len(committed_steps(project, run_id)) >= 2, what="two snapshots")
    program = running_attempt(project.catalog(), run_id)["pid"]
    os.kill(program, signal.SIGSTOP)  # freeze it, so the newest snapshot stays the newest
    _wait_until_no_new_commits(project, run_id, program)  # every published folder captured
    newest, older = project.store().list(run=run_id, stage="main")[-1:-3:-1]
    for entry in newest.files:
        blob = project.home / "store" / "blobs" / entry.hash[:2] / entry.hash
        blob.write_bytes(b"X" * entry.size)  # same size, other bytes: only hashes tell
    project.done_killing()
    os.kill(program, signal.SIGKILL)
    runner.communicate(timeout=120)
    assert runner.returncode == 0
    run = project.get(run_id)
    assert run["stages"][0]["attempts"][1]["restored_step"] == older.step
    damaged = [e for e in run["events"] if e["type"] == "snapshot_damaged"]
    assert damaged and damaged[0]["snapshot"] == newest.id
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def _damage_every_checkpoint(project, run_id: str) -> list:
    """Overwrite every blob of every restorable checkpoint (same size, other bytes: only
    hashes tell); the snapshots, newest first."""
    manifests = newest_first(project.store().list(run=run_id, stage="main"))
    for manifest in manifests:
        for entry in manifest.files:
            blob = project.home / "store" / "blobs" / entry.hash[:2] / entry.hash
            if entry.kind in manifest.kinds and entry.size:
                blob.chmod(0o644)
                blob.write_bytes(b"X" * entry.size)
    return manifests


def _fails_naming_each(project, run_id: str, manifests: list, message: str) -> None:
    """The run FAILED naming every snapshot, its step and its damage; nothing started over.

    What the recovery had to choose from is what the store holds with training state when it
    ran: rotation (a background thread of the first attempt, joined before the next starts)
    may take an older snapshot's state after the test damaged it, and the killed attempt's
    last capture may take an older checkpoint on its disk again (its blobs, the same bytes,
    are the damaged ones). Every damaged snapshot rotation left is among them."""
    run = project.get(run_id)
    assert run["phase"] == "FAILED" and run["exit_status"] == 1
    assert "rather than start again from the beginning" in message
    rotated = {
        e["snapshot"]
        for e in run["events"]
        if e["type"] == "snapshot_kind_deleted" and e["kind"] in ("state", "files")
    }
    listed = project.store().list(run=run_id, stage="main")
    candidates = newest_first(m for m in listed if holds_training_state(m))
    left = {m.id for m in manifests if m.id not in rotated}
    assert left and left <= {m.id for m in candidates}, (left, candidates)
    manifests = candidates
    for manifest in manifests:
        assert f"{manifest.id} (step {manifest.step}): " in message, message
    damaged = [e for e in run["events"] if e["type"] == "snapshot_damaged"]
    assert [(e["snapshot"], e["step"]) for e in damaged] == [(m.id, m.step) for m in manifests]
    last = run["stages"][0]["attempts"][-1]
    assert last["outcome"] == "failed" and last["restored_step"] is None


def test_runs_resume_with_every_snapshot_damaged_fails_naming_each(project):
    project.write(
        steps=STEPS,
        save_every=SAVE_EVERY,
        sleep=SLEEP,
        body='[continuity]\nmode = "checkpointed"\nresume_on_interruption = false\n',
    )
    runner = project.start("run", "workload.toml", "--key", "all")
    run_id = wait_for(lambda: _run_id(project, "all"), what="the run")
    kill_program(project, run_id, after_step=SAVE_EVERY)
    _out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 3
    manifests = _damage_every_checkpoint(project, run_id)
    assert len(manifests) >= 2
    resumed = project.nodus("runs", "resume", run_id)
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert "counter: starting at step" not in resumed.stdout  # no program ran at all
    _fails_naming_each(project, run_id, manifests, resumed.stderr)
    assert project.catalog().attempts(run_id, "main")[-1]["pid"] is None
    assert not project.store().list(run=run_id, stage="main", role="outputs")


def test_a_recovery_with_every_snapshot_damaged_fails_naming_each(project):
    project.write(steps=STEPS, save_every=SAVE_EVERY, sleep=SLEEP)
    runner = project.start("run", "workload.toml", "--key", "all")
    run_id = wait_for(lambda: _run_id(project, "all"), what="the run")
    wait_for(lambda: len(committed_steps(project, run_id)) >= 2, what="two snapshots")
    program = running_attempt(project.catalog(), run_id)["pid"]
    os.kill(program, signal.SIGSTOP)  # freeze it, so no newer snapshot comes
    _wait_until_no_new_commits(project, run_id, program)
    manifests = _damage_every_checkpoint(project, run_id)
    os.kill(program, signal.SIGKILL)
    out, err = runner.communicate(timeout=120)
    assert runner.returncode == 1, err
    assert out.count("counter: starting at step 0") == 1  # the first attempt's start only
    _fails_naming_each(project, run_id, manifests, err)
    doc_samples.check("restore-damaged", err)
    attempts = project.catalog().attempts(run_id, "main")
    assert [a["outcome"] for a in attempts] == ["lost", "failed"]
    assert attempts[-1]["pid"] is None


def _wait_until_no_new_commits(project, run_id: str, program: int) -> None:
    """Return once the newest checkpoint the (stopped) ``program`` published is committed: it
    publishes each by rename, so none newer can come while it is stopped."""
    newest = _newest_on_disk(program)
    assert newest is not None, "the program has published no checkpoint"
    wait_for(
        lambda: newest in committed_steps(project, run_id),
        what=f"the newest checkpoint on disk (step {newest}) committed",
    )


def _newest_on_disk(pid: int) -> int | None:
    """The newest ``checkpoint-<step>`` in the checkpoint folder of the program ``pid``."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    variables = dict(item.split("=", 1) for item in environ if "=" in item)
    state = variables.get(protocol.ENV_CHECKPOINT_DIR) or protocol.STATE_DIR
    state = os.path.join(os.readlink(f"/proc/{pid}/cwd"), state)  # an absolute one stays
    steps = [
        int(name.rsplit("-", 1)[1])
        for name in os.listdir(state)
        if re.fullmatch(r"checkpoint-\d+", name)
    ]
    return max(steps, default=None)


def test_a_recovery_takes_the_killed_programs_checkpoint_only_where_it_verifies(project):
    """No copy of what is already on the disk, and never a byte the snapshot does not hold."""
    project.write(
        steps=STEPS,
        save_every=SAVE_EVERY,
        sleep=SLEEP,
        extra_args=("--state-bytes", "65536"),
        gated=True,
    )
    runner = project.start("run", "workload.toml", "--key", "reuse")
    run_id = wait_for(lambda: _run_id(project, "reuse"), what="the run")
    wait_for(lambda: committed_steps(project, run_id), what="a snapshot")
    program = running_attempt(project.catalog(), run_id)["pid"]
    os.kill(program, signal.SIGSTOP)  # the newest snapshot stays the newest
    _wait_until_no_new_commits(project, run_id, program)
    newest = project.store().list(run=run_id, stage="main")[-1]
    folder = (
        project.home / "work" / run_id / "main" / "copy" / "state" / f"checkpoint-{newest.step}"
    )
    kept = os.stat(folder / "state.json").st_ino
    weights = folder / "weights.bin"
    original, stamp = weights.read_bytes(), os.stat(weights)
    # Other bytes behind the capture's back (same size and mtime: nothing notices a change).
    weights.write_bytes(b"X" * len(original))
    os.utime(weights, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    os.kill(program, signal.SIGKILL)
    wait_for(
        lambda: (running_attempt(project.catalog(), run_id) or {}).get("number", 0) > 1,
        what="the recovered attempt",
    )
    os.kill(running_attempt(project.catalog(), run_id)["pid"], signal.SIGSTOP)
    assert os.stat(folder / "state.json").st_ino == kept  # verified and moved in, not copied
    assert weights.read_bytes() == original  # not what was left there: the snapshot's bytes
    project.done_killing()
    os.kill(running_attempt(project.catalog(), run_id)["pid"], signal.SIGCONT)
    runner.communicate(timeout=120)
    assert runner.returncode == 0
    run = project.get(run_id)
    assert run["stages"][0]["attempts"][1]["restored_step"] == newest.step
    assert project.result(run_id) == {"steps": STEPS, "value": expected_value(STEPS)}


def _text(path: str | None) -> str:
    if not path:
        return ""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""
