"""Secrets are named, never stored; nodus's files are its user's alone (docs/security.md).

Real `nodus` processes run a program that is given a secret through `secrets`: it proves it got
the value (its SHA-256 in a file outside the working copy and in its output) and the test then
reads every byte nodus wrote (the home, the local store, the objects of a remote S3 store) and
finds the value nowhere. Every such run happens under umask 022, the usual one, and the modes
of what nodus created are checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from runner_helpers import NODUS, Project

PROGRAM = """\
import hashlib, os, sys
value = os.environ["HF_TOKEN"]
digest = hashlib.sha256(value.encode()).hexdigest()
with open(sys.argv[1], "w") as handle:  # outside the working copy: the test reads it
    handle.write(digest)
os.makedirs("out", exist_ok=True)
with open("out/digest.txt", "w") as handle:  # an output: stored with the run
    handle.write(digest)
os.makedirs("state/checkpoint-1", exist_ok=True)  # a snapshot: stored too
with open("state/checkpoint-1/progress.json", "w") as handle:
    handle.write('{"step": 1}')
print("digest", digest)
"""


@contextlib.contextmanager
def umask(mask: int):
    """Run what the block starts under ``mask`` (children inherit it)."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def secret_value() -> str:
    return f"nodus-secret-{uuid.uuid4().hex}"


def write_secret_workload(project: Project, proof: Path, *, extra: str = "") -> None:
    (project.root / "prog.py").write_text(PROGRAM)
    command = [sys.executable, "prog.py", str(proof)]
    project.file.write_text(
        f'name = "secretive"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n'
        f'secrets = ["HF_TOKEN"]\nenv = {{ WANDB_MODE = "disabled" }}\n{extra}'
    )


def files_under(root: Path) -> list[Path]:
    return [Path(folder) / name for folder, _dirs, names in os.walk(root) for name in names]


def holding(root: Path, value: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``value``."""
    found = []
    for path in files_under(root):
        if path.is_symlink() or not path.is_file():
            continue
        if value in path.read_bytes():
            found.append(str(path))
    return found


def loose_modes(home: Path) -> list[str]:
    """What under ``home`` is not its user's alone: a folder other than 0700, a file other than
    0600, a writable blob. A working copy's contents are the program's (the source's modes)."""
    copies = [p for p in (home / "work").glob("*/*/copy")]
    loose = []
    for folder, _dirs, names in os.walk(home):
        here = Path(folder)
        if any(here == copy or copy in here.parents for copy in copies):
            continue
        mode = stat.S_IMODE(here.stat().st_mode)
        if mode != 0o700:
            loose.append(f"{oct(mode)} {here}/")
        for name in names:
            path = here / name
            if path.is_symlink():
                continue
            mode = stat.S_IMODE(path.lstat().st_mode)
            if "blobs" in path.relative_to(home).parts:
                # a blob keeps its file's read-only mode (restores link it into working
                # copies); the 0700 folders above it keep others out
                if mode & 0o222:
                    loose.append(f"{oct(mode)} {path} (a writable blob)")
            elif mode != 0o600:
                loose.append(f"{oct(mode)} {path}")
    return loose


def test_a_secret_reaches_the_program_and_no_byte_nodus_wrote_holds_it(project, tmp_path):
    value = secret_value()
    proof = tmp_path / "proof.txt"
    write_secret_workload(project, proof)
    with umask(0o022):
        proc = project.nodus("run", "workload.toml", "--key", "s1", env={"HF_TOKEN": value})
    assert proc.returncode == 0, proc.stderr
    digest = hashlib.sha256(value.encode()).hexdigest()
    assert proof.read_text() == digest  # the program had the value
    assert f"digest {digest}" in proc.stdout
    assert value not in proc.stdout + proc.stderr

    # Nowhere under the home: catalog (and its WAL), cache, logs, working copies, the store.
    assert holding(project.home, value.encode()) == []
    # Nor in what the commands show.
    shown = project.nodus("runs", "get", "s1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert value not in shown.stdout
    # The catalog keeps the resolution with the name alone.
    stored = project.catalog().get_run(json.loads(shown.stdout)["id"]).workload
    assert stored["stages"][0]["secrets"] == ["HF_TOKEN"]
    resolved = project.nodus("resolve", "workload.toml", "--json", env={"HF_TOKEN": value})
    assert resolved.returncode == 0 and value not in resolved.stdout + resolved.stderr
    # The run's record in its store holds the name only.
    records = [p for p in files_under(project.home / "store" / "runs") if p.suffix == ".json"]
    assert records and any(b'"HF_TOKEN"' in p.read_bytes() for p in records)


def test_what_nodus_creates_is_its_users_alone_whatever_the_umask(project, tmp_path):
    """Under umask 022: the home 0700; every folder nodus made 0700 (a working copy's own
    folders aside: they are the program's); the catalog, its WAL and shared memory, the cache,
    the locks, the logs and every object of the local store 0600, blobs read-only."""
    write_secret_workload(project, tmp_path / "proof.txt")
    assert not project.home.exists()
    with umask(0o022):
        proc = project.nodus("run", "workload.toml", env={"HF_TOKEN": secret_value()})
    assert proc.returncode == 0, proc.stderr

    home = project.home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("nodus.db", "nodus.db-wal", "nodus.db-shm"):
        if (home / name).exists():
            assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    cached = list((home / "cache").rglob("*.json"))
    assert cached, "nodus run remembered no resolution"
    assert loose_modes(home) == []
    store = home / "store"
    blobs = store / "blobs"
    assert list(blobs.rglob("*")) and list((store / "snapshots").rglob("*.json"))


def test_a_secret_missing_at_an_attempt_fails_it_naming_the_variable(project, tmp_path):
    proof = tmp_path / "proof.txt"
    write_secret_workload(project, proof, extra='[[stages]]\nname = "main"\nsecrets = ["B_KEY"]\n')
    env = project.env()
    env.pop("HF_TOKEN", None)
    env["B_KEY"] = "present"
    proc = subprocess.run(
        [*NODUS, "run", "workload.toml", "--key", "gone"],
        cwd=project.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "HF_TOKEN" in proc.stderr and "B_KEY" not in proc.stderr.split("FAILED")[-1]
    assert "Traceback" not in proc.stderr
    assert not proof.exists()  # the program never started
    run = project.get("gone")
    assert run["phase"] == "FAILED"
    assert "secret HF_TOKEN" in run["message"]


def test_a_secret_never_reaches_a_remote_store_nor_the_staging_area(project, s3_server, tmp_path):
    import s3fs

    value = secret_value()
    bucket = s3_server.bucket()
    url = f"s3://{bucket}/runs"
    write_secret_workload(project, tmp_path / "proof.txt")
    with umask(0o022):
        proc = project.nodus(
            "--store", url, "run", "workload.toml", env={**s3_server.env, "HF_TOKEN": value}
        )
    assert proc.returncode == 0, proc.stderr
    digest = hashlib.sha256(value.encode()).hexdigest()
    assert (tmp_path / "proof.txt").read_text() == digest

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server.endpoint})
    keys = fs.find(bucket)
    assert any("/runs/" in key for key in keys) and any("/blobs/" in key for key in keys)
    uploaded = [key for key in keys if value.encode() in fs.cat_file(key)]
    assert uploaded == []
    records = [key for key in keys if "/runs/" in key and key.endswith(".json")]
    assert any(b'"HF_TOKEN"' in fs.cat_file(key) for key in records)
    assert holding(project.home, value.encode()) == []
    assert (project.home / "staging").is_dir()  # captures were staged here first
    assert loose_modes(project.home) == []


def test_a_store_urls_password_is_never_repeated(project, s3_server):
    bucket = s3_server.bucket()
    url = f"s3://alice:hunter2-not-echoed@{bucket}/runs"
    for args in (("runs", "list"), ("store", "verify"), ("gc", "--dry-run")):
        proc = project.nodus("--store", url, *args, env=s3_server.env, timeout=120)
        assert "hunter2-not-echoed" not in proc.stdout + proc.stderr, args
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("where", ["top", "stage"])
def test_a_secret_also_in_env_is_refused_naming_it(project, where):
    (project.root / "prog.py").write_text("print(1)\n")
    body = 'name = "w"\ncommand = "python prog.py"\nenv = { HF_TOKEN = "inline-value-x" }\n'
    if where == "top":
        body += 'secrets = ["HF_TOKEN"]\n'
    else:
        body += '[[stages]]\nname = "main"\nsecrets = ["HF_TOKEN"]\n'
    project.file.write_text(body)
    proc = project.nodus("validate", "workload.toml")
    assert proc.returncode == 2
    path = "secrets" if where == "top" else "stages[0].secrets"
    assert f"{path}: 'HF_TOKEN' — 'HF_TOKEN' is also set in env" in proc.stderr
    assert "inline-value-x" not in proc.stderr and "Traceback" not in proc.stderr


CREDENTIAL_FILES = {
    ".env": "HF_TOKEN=x\n",
    ".aws/credentials": "[default]\n",
    "certs/server.pem": "-----BEGIN-----\n",
    ".netrc": "machine h\n",
    "keys/id_rsa": "k\n",
}


def test_credential_looking_files_are_named_with_nodusignore_until_left_out(project):
    (project.root / "prog.py").write_text("print('ran')\n")
    project.file.write_text(
        f'name = "w"\ncommand = ["{sys.executable}", "prog.py"]\ncontinuity = "restartable"\n'
    )
    for path, text in CREDENTIAL_FILES.items():
        (project.root / path).parent.mkdir(parents=True, exist_ok=True)
        (project.root / path).write_text(text)
    (project.root / ".env.example").write_text("HF_TOKEN=\n")  # a template: not a credential
    listed = sorted(CREDENTIAL_FILES)

    resolved = project.nodus("resolve", "workload.toml", "--json")
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["sources"][0]["credentials"] == listed
    warning = next(line for line in resolved.stderr.splitlines() if "credentials" in line)
    assert all(path in warning for path in listed) and ".env.example" not in warning
    assert ".nodusignore" in warning and "secrets" in warning

    ran = project.nodus("run", "workload.toml")
    assert ran.returncode == 0, ran.stderr
    assert warning in ran.stderr  # the same words at acceptance

    (project.root / ".nodusignore").write_text("\n".join(listed) + "\n")
    quiet = project.nodus("run", "workload.toml")
    assert quiet.returncode == 0, quiet.stderr
    assert "look like credentials" not in quiet.stderr


def test_an_env_variable_named_like_a_credential_is_pointed_at_secrets(project):
    (project.root / "prog.py").write_text("print('ran')\n")
    project.file.write_text(
        f'name = "w"\ncommand = ["{sys.executable}", "prog.py"]\ncontinuity = "restartable"\n'
        'env = { WANDB_API_KEY = "inline-key-value", TOKENIZERS_PARALLELISM = "false" }\n'
    )
    ran = project.nodus("run", "workload.toml")
    assert ran.returncode == 0, ran.stderr
    (line,) = [text for text in ran.stderr.splitlines() if "looks like a credential" in text]
    assert "env WANDB_API_KEY" in line and 'secrets = ["WANDB_API_KEY"]' in line
    assert "TOKENIZERS_PARALLELISM" not in ran.stderr
    assert "inline-key-value" not in ran.stderr


RESTORED_PRINTER = """\
import json, os, signal, sys, time
state = os.environ["NODUS_CHECKPOINT_DIR"]
if os.path.isdir(os.path.join(state, "checkpoint-1")):  # restored: prints its secret, fails
    print("loading with token", os.environ["HF_TOKEN"], file=sys.stderr, flush=True)
    sys.exit(1)
os.makedirs(os.path.join(state, "checkpoint-1"))
with open(os.path.join(state, "checkpoint-1", "progress.json"), "w") as handle:
    handle.write('{"step": 1}')
committed = os.path.join(os.environ["NODUS_CONTROL_DIR"], "committed.json")
while not os.path.exists(committed):
    time.sleep(0.05)  # the runner's notice that step 1 is committed
os.kill(os.getpid(), signal.SIGKILL)  # interrupted: the recovery restores step 1
"""


def test_a_secret_a_restored_program_prints_before_failing_is_recorded_nowhere(project):
    """The restored attempt's last line, its secret's value, makes the snapshot suspect and
    the attempt's failure: the catalog, the store and `runs get --json` hold it masked."""
    value = secret_value()
    (project.root / "prog.py").write_text(RESTORED_PRINTER)
    project.file.write_text(
        f'name = "printer"\ncommand = {json.dumps([sys.executable, "prog.py"])}\n'
        'secrets = ["HF_TOKEN"]\n[execution]\nmax_recoveries = 2\n'
    )
    proc = project.nodus("run", "workload.toml", "--key", "p1", env={"HF_TOKEN": value})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    shown = project.nodus("runs", "get", "p1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert value not in shown.stdout
    run = json.loads(shown.stdout)
    events = project.catalog().events(run["id"])
    suspects = [e["details"] for e in events if e["type"] == "snapshot_suspect"]
    assert suspects and "loading with token ***" in json.dumps(suspects)
    # The catalog (its WAL too) and every object of the store; the program's own output log
    # is the program's (docs/security.md) and keeps what it printed.
    catalog = [p for p in project.home.glob("nodus.db*")]
    assert [str(p) for p in catalog if value.encode() in p.read_bytes()] == []
    assert holding(project.home / "store", value.encode()) == []
    # nodus's own lines: the echo of the program's output ("[main] …") is the program's
    echoed = "".join(line for line in proc.stdout.splitlines(True) if line.startswith("[main]"))
    assert value in echoed
    assert value not in proc.stderr + proc.stdout.replace(echoed, "")
    snapshots = project.nodus("runs", "snapshots", "p1")
    assert value not in snapshots.stdout + snapshots.stderr
