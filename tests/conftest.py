"""Fixtures shared by every test area. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import scheduling

# No hub exists here: everything is built locally.
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
    # One thread per training process: the suite runs three workers on two cores, and torch's
    # default of a thread per core spins each waiting thread against the other worker's
    # processes. Measured on the quick-start program under that load: 7.4-9.1 s of CPU with the
    # default, 4.3 s with one thread (docs/benchmarks.md, "The test suite"). Every comparison
    # of two runs is made under the same setting, as a user's would be.
    "OMP_NUM_THREADS": "1",
}.items():
    os.environ.setdefault(_name, _value)

REPO = Path(__file__).resolve().parents[1]
NODUS = [sys.executable, "-m", "nodus"]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` the heaviest tests are sent first (:mod:`scheduling`), and each
    ``xdist_group`` must run on one worker (one Ray cluster at a time, a shared trained run);
    pytest-xdist marks that in the node id. A pytest/xdist pair where it no longer does is
    refused here, rather than quietly running the groups apart."""
    if not getattr(config.option, "loadgroup", False):
        return
    items[:] = scheduling.longest_first(items)  # the same order on each worker: xdist checks
    apart = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if apart:
        raise pytest.UsageError(
            f"--dist loadgroup does not group {apart[0]} with this pytest and pytest-xdist "
            "(pytest 9.2 broke it for xdist 3.8): install the versions in constraints.txt"
        )


LIBRARY_EXPORTS = ("ACCELERATE_", "CUBLAS_", "CUDA_", "ASCEND_", "HCCL_", "FLASH_ATTENTION_")
"""Prefixes of the variables Transformers and Accelerate export into their own process:
``TrainingArguments(bf16=True)`` sets ``ACCELERATE_MIXED_PRECISION=bf16``,
``enable_full_determinism`` sets ``CUBLAS_WORKSPACE_CONFIG`` and others."""


@pytest.fixture(autouse=True)
def _library_exports_restored():
    """Each test gets the library exports the one before it had: a Trainer built in-process
    with ``bf16=True`` would make every later Trainer of this process, and every program a later
    test starts, train in bf16. (Only those: session fixtures set up in a test's middle, such as
    the S3 server's credentials, must outlive it.)"""
    saved = {k: v for k, v in os.environ.items() if k.startswith(LIBRARY_EXPORTS)}
    yield
    for name in [k for k in os.environ if k.startswith(LIBRARY_EXPORTS)]:
        if name not in saved:
            del os.environ[name]
    os.environ.update(saved)


@pytest.fixture
def nodus_home(tmp_path, monkeypatch) -> Path:
    """A private $NODUS_HOME for one test (catalog and default store)."""
    home = tmp_path / "nodus-home"
    home.mkdir()
    monkeypatch.setenv("NODUS_HOME", str(home))
    monkeypatch.delenv("NODUS_STORE", raising=False)
    return home


def run_nodus(*args: str, cwd=None, env=None, timeout: float = 300, check: bool = False):
    """Run the real `nodus` command line in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [*NODUS, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"nodus {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


# --- a real S3 server on loopback --------------------------------------------------------------
#
# moto in server mode is a real HTTP server speaking the S3 protocol; s3fs talks to it exactly as
# it would to AWS, configured the way a user configures it: AWS_ENDPOINT_URL and credentials in
# the environment. Its buckets live in this test process, so a server stopped and started again
# on the same port (an outage) still holds everything stored before.

S3_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class S3Server:
    """A moto S3 server on a free loopback port that a test can stop and start again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = None

    @property
    def env(self) -> dict[str, str]:
        """What a `nodus` process needs to reach it."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> S3Server:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port)
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def bucket(self) -> str:
        """A fresh bucket; s3fs's cached clients are dropped so none talks to an old server."""
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": self.endpoint})
        name = f"nodus-{uuid.uuid4().hex[:12]}"
        fs.mkdir(name)
        return name


@pytest.fixture(scope="session")
def s3_endpoint():
    """The session's S3 server, its endpoint and credentials set in this process's environment."""
    server = S3Server().start()
    saved = {name: os.environ.get(name) for name in S3_ENV}
    os.environ.update(server.env)
    yield server.endpoint
    server.stop()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def s3_bucket(s3_endpoint):
    """A fresh bucket on the session's S3 server; s3fs's cached clients are dropped afterwards."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_endpoint})
    bucket = f"nodus-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield bucket
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_server(monkeypatch):
    """A private S3 server for one test, which it may stop and start (an outage); its
    endpoint and credentials are set in this process's environment for the test."""
    server = S3Server().start()
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    yield server
    server.stop()
