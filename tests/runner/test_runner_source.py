"""A run's source never surprises (docs/workload-file.md): its size is stated, a large one is
pointed out, one above ``max_source_bytes`` is refused before a byte is copied, and folders that
are never source (a virtual environment, caches) stay out of the store and of every working copy.

Real ``nodus`` processes on real folders. Large files are sparse (``os.truncate``): they cost no
disk, and no test copies one: the 256 MiB warning is checked through ``nodus resolve``, which
measures the source the way ``nodus run`` does but never copies it.
"""

from __future__ import annotations

import json
import os

from nodus.schemas import defaults
from nodus.schemas.units import human_bytes

MIB = 1024 * 1024
NEVER_SOURCE = [
    ".venv/lib/python3/site-packages/torch/__init__.py",
    "venv/bin/activate",
    "__pycache__/train.cpython-312.pyc",
    "pkg/__pycache__/model.cpython-312.pyc",
    ".pytest_cache/v/cache/lastfailed",
    ".mypy_cache/3.12/train.meta.json",
    ".ipynb_checkpoints/explore-checkpoint.ipynb",
    "node_modules/left-pad/index.js",
    "wandb/run-1/files/output.log",
]


def _files(root, paths):
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)


def _sparse(path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        os.truncate(handle.fileno(), size)


def _source_manifest(project, run_id: str):
    (stage,) = project.get(run_id)["stages"]
    return project.store().get(stage["source_snapshot"])


def _copy_files(project, run_id: str) -> set[str]:
    copy = project.home / "work" / run_id / "main" / "copy"
    return {
        os.path.relpath(os.path.join(folder, name), copy)
        for folder, _dirs, names in os.walk(copy)
        for name in names
    }


def _run(project, *args: str):
    proc = project.nodus("run", "workload.toml", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_resolve_states_the_size_and_warns_above_256_mib_naming_the_largest_files(project):
    project.write(steps=1)
    quiet = project.nodus("resolve", "workload.toml")
    assert (quiet.returncode, quiet.stderr) == (0, "")  # a small source: nothing to say
    _sparse(project.root / "data" / "tokens.bin", 300 * MIB)
    _sparse(project.root / "data" / "labels.bin", 3 * MIB)

    proc = project.nodus("resolve", "workload.toml")
    assert proc.returncode == 0, proc.stderr
    (source,) = json.loads(proc.stdout)["sources"]
    assert source["code"] == str(project.root) and source["stages"] == ["main"]
    assert source["bytes"] == 303 * MIB + project.file.stat().st_size
    assert source["largest"][:2] == [
        {"path": "data/tokens.bin", "bytes": 300 * MIB},
        {"path": "data/labels.bin", "bytes": 3 * MIB},
    ]
    assert source["max_source_bytes"] == defaults.MAX_SOURCE_BYTES
    warning = proc.stderr
    assert "is 303.0 MiB" in warning and "300.0 MiB  data/tokens.bin" in warning
    assert str(project.root / ".nodusignore") in warning and "`data/tokens.bin`" in warning
    assert "refuses" not in warning.splitlines()[0]  # a warning: the run would be accepted


def test_a_run_states_its_source_size_on_the_acceptance_line(project):
    project.write(steps=2, save_every=1)
    _files(project.root, ["train.py", "conf/model.json"])
    run, said = _run(project, "--key", "sized")
    manifest = _source_manifest(project, run["id"])
    files = len(manifest.files)
    assert files == 3  # the workload file, train.py, conf/model.json
    line = f"nodus: accepted {run['id']} under key 'sized' (source "
    assert f"{line}{human_bytes(manifest.total_bytes)} in {files} files)\n" in said
    (captured,) = [e for e in run["events"] if e["type"] == "source_captured"]
    assert (captured["bytes"], captured["files"]) == (manifest.total_bytes, files)


def test_a_source_above_max_source_bytes_is_refused_and_nothing_is_copied(project):
    project.write(steps=2, save_every=1, body="[execution]\nmax_source_bytes = 1048576\n")
    _sparse(project.root / "weights.bin", 5 * MIB)

    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "5.0 MiB, above [execution] max_source_bytes = 1048576 (1.0 MiB)" in proc.stderr
    assert "5.0 MiB  weights.bin" in proc.stderr and ".nodusignore" in proc.stderr
    stored = [names for _folder, _dirs, names in os.walk(project.home / "store") if names]
    assert stored == []  # no blob, no manifest, not even a temporary file
    assert json.loads(project.nodus("runs", "list", "--json").stdout) == []

    # The advice works: the file left out, the same workload is accepted.
    (project.root / ".nodusignore").write_text("weights.bin\n")
    run, _said = _run(project)
    paths = {entry.path for entry in _source_manifest(project, run["id"]).files}
    assert paths == {"workload.toml", ".nodusignore"}


def test_folders_that_are_never_source_stay_out_of_the_store_and_the_working_copy(project):
    project.write(steps=2, save_every=1)
    _files(project.root, ["train.py", "pkg/model.py", *NEVER_SOURCE])
    run, _said = _run(project)
    paths = {entry.path for entry in _source_manifest(project, run["id"]).files}
    assert paths == {"workload.toml", "train.py", "pkg/model.py"}
    copied = _copy_files(project, run["id"])
    assert not copied & set(NEVER_SOURCE)
    assert {"train.py", "pkg/model.py"} <= copied


def test_a_bang_line_brings_a_default_back_and_resolve_shows_the_excludes(project):
    project.write(steps=2, save_every=1)
    _files(project.root, [".venv/lib/site.py", ".venv/__pycache__/x.pyc", ".git/HEAD"])
    (project.root / ".nodusignore").write_text("# the program imports from it\n!.venv\n!.git\n")

    resolved = project.nodus("resolve", "workload.toml")
    assert resolved.returncode == 0, resolved.stderr
    (source,) = json.loads(resolved.stdout)["sources"]
    excludes = source["excludes"]
    assert excludes[: len(defaults.SOURCE_DEFAULT_EXCLUDES)] == list(
        defaults.SOURCE_DEFAULT_EXCLUDES
    )
    assert excludes.index("!.venv") > excludes.index(".venv")  # the later line wins
    assert excludes.index(".git") > excludes.index("!.git")  # .git is never source

    run, _said = _run(project)
    paths = {entry.path for entry in _source_manifest(project, run["id"]).files}
    assert ".venv/lib/site.py" in paths
    assert ".venv/__pycache__/x.pyc" not in paths  # brought back: the folder, not its caches
    assert ".git/HEAD" not in paths
    assert ".venv/lib/site.py" in _copy_files(project, run["id"])


def test_nodusignore_lines_follow_gitignore_in_the_store_and_the_working_copy(project):
    """tests/runner/test_nodusignore.py holds a test per rule; this is the run that uses them."""
    project.write(steps=2, save_every=1)
    paths = ["train.py", "data/a.bin", "src/data/b.py", "model.ckpt", "src/m.ckpt", "keep.ckpt"]
    _files(project.root, [*paths, "build", "src/build/x.o", "#notes"])
    ignore = "# outputs\n/data\n**/*.ckpt\n!keep.ckpt\nbuild/\n\\#notes\n"
    (project.root / ".nodusignore").write_text(ignore)
    run, _said = _run(project)
    paths = {entry.path for entry in _source_manifest(project, run["id"]).files}
    expected = {"workload.toml", ".nodusignore", "train.py", "src/data/b.py", "keep.ckpt", "build"}
    assert paths == expected
    copied = _copy_files(project, run["id"])
    assert copied >= expected - {".nodusignore"}
    assert not copied & {"data/a.bin", "model.ckpt", "src/m.ckpt", "src/build/x.o", "#notes"}


def test_a_command_inside_a_left_out_folder_is_refused(project):
    project.write(command=[".venv/bin/python", "train.py"])
    _files(project.root, [".venv/bin/python", "train.py"])
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 2, proc.stderr
    assert "command '.venv/bin/python' lies in a folder the source leaves out" in proc.stderr
    assert json.loads(project.nodus("runs", "list", "--json").stdout) == []


def test_resume_from_a_run_that_does_not_exist_is_refused_at_submit(project):
    project.write(steps=2, body='resume_from = "run_0123@4"\n')
    assert project.nodus("validate", "workload.toml").returncode == 0  # the file is fine
    proc = project.nodus("run", "workload.toml")
    assert proc.returncode == 2, proc.stderr
    assert "resume_from: 'run_0123@4' — no run with id or key 'run_0123'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(project.nodus("runs", "list", "--json").stdout) == []
