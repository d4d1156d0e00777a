"""Symlinks inside checkpoint folders never crash the runner or block a capture (issue 39.6).

A program publishes ``checkpoint-<step>`` folders holding a symlink loop, a dangling link, an
absolute link leading out of the selection, a relative link inside it and a dangling link
whose name's format is checked (``ema.ckpt``: no tear); its first attempt
is killed after step 4. The runner captures every folder (links inside kept as links, the one
leading out left out with ``capture_symlink_refused``) and the recovery restores step 4 with
its links as they were.
"""

from __future__ import annotations

import json
import sys

PROGRAM = """\
import json, os, signal, sys, time
state = os.environ["NODUS_CHECKPOINT_DIR"]
os.makedirs(state, exist_ok=True)
steps = sorted(int(n[11:]) for n in os.listdir(state) if n[11:].isdigit())
start = steps[-1] if steps else 0
seen = {}
if start:
    folder = os.path.join(state, f"checkpoint-{start}")
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        seen[name] = os.readlink(path) if os.path.islink(path) else "file"
for step in range(start + 1, 7):
    if step % 2 == 0:
        building = os.path.join(state, f".building-{step}")
        os.makedirs(building)
        with open(os.path.join(building, "state.json"), "w") as handle:
            json.dump({"step": step}, handle)
        os.symlink("loop", os.path.join(building, "loop"))
        os.symlink("nowhere", os.path.join(building, "dangling"))
        os.symlink(sys.executable, os.path.join(building, "absolute"))
        os.symlink("state.json", os.path.join(building, "inside"))
        # a dangling link with a name whose format is checked: no tear
        os.symlink("later.ckpt", os.path.join(building, "ema.ckpt"))
        os.rename(building, os.path.join(state, f"checkpoint-{step}"))
        print("saved", step, flush=True)
    if step == 4 and not os.path.exists(sys.argv[1]):
        open(sys.argv[1], "w").close()
        committed = os.path.join(os.environ["NODUS_CONTROL_DIR"], "committed.json")
        while not os.path.exists(committed) or json.load(open(committed))["step"] != 4:
            time.sleep(0.05)  # the runner's notice that step 4 is committed
        os.kill(os.getpid(), signal.SIGKILL)  # interrupted once: the recovery restores step 4
os.makedirs("out", exist_ok=True)
with open("out/result.json", "w") as handle:
    json.dump({"start": start, "seen": seen}, handle)
"""


def test_links_in_checkpoint_folders_are_captured_and_restored(project):
    (project.root / "prog.py").write_text(PROGRAM)
    failed_once = project.root.parent / "failed-once"
    project.write(command=[sys.executable, "prog.py", str(failed_once)])
    proc = project.nodus("run", str(project.file), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    run_id = json.loads(proc.stdout)["id"]
    run = project.get(run_id)
    assert run["phase"] == "SUCCEEDED"
    result = project.result(run_id)
    assert result["start"] == 4
    assert result["seen"] == {
        "dangling": "nowhere",
        "inside": "state.json",
        "loop": "loop",
        "ema.ckpt": "later.ckpt",
        "state.json": "file",
    }
    events = project.catalog().events(run_id)
    refused = {e["details"]["path"] for e in events if e["type"] == "capture_symlink_refused"}
    assert {"state/checkpoint-2/absolute", "state/checkpoint-4/absolute"} <= refused
    committed = sorted({e["details"]["step"] for e in events if e["type"] == "snapshot_committed"})
    assert committed[:2] == [2, 4] and committed[-1] == 6
    manifest = next(m for m in project.store().list(run=run_id) if m.step == 4)
    links = {e.path: e.target for e in manifest.files if e.is_link}
    assert links == {
        "state/checkpoint-4/dangling": "nowhere",
        "state/checkpoint-4/inside": "state.json",
        "state/checkpoint-4/loop": "loop",
        "state/checkpoint-4/ema.ckpt": "later.ckpt",
    }
