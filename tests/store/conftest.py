"""Store fixtures: one store per test on file://, memory:// and a real S3 server on loopback.

The S3 server is moto in server mode (a real HTTP server speaking the S3 protocol), started
once per session on a free port; s3fs talks to it exactly as it would to AWS, configured the
way a user configures it: AWS_ENDPOINT_URL and credentials in the environment.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from nodus.store import open_store

STORE_KINDS = ("file", "memory", "s3")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {name: os.environ.get(name) for name in _S3_ENV}
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    yield endpoint
    server.stop()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


_S3_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


@pytest.fixture
def s3_bucket(s3_endpoint):
    """A fresh bucket on the loopback S3 server; s3fs's cached clients are dropped afterwards."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_endpoint})
    bucket = f"nodus-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield bucket
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(params=STORE_KINDS)
def store_url(request, tmp_path):
    """The URL of an empty store of each kind."""
    if request.param == "file":
        yield "file://" + str(tmp_path / "store")
    elif request.param == "memory":
        import fsspec

        name = f"nodus-{uuid.uuid4().hex[:12]}"
        yield f"memory://{name}"
        try:
            fsspec.filesystem("memory").rm(f"/{name}", recursive=True)
        except FileNotFoundError:
            pass
    else:
        yield f"s3://{request.getfixturevalue('s3_bucket')}/snapshots"


@pytest.fixture
def store(store_url):
    return open_store(store_url)


@pytest.fixture
def live(tmp_path):
    """A live folder to capture from (the working copy a program writes into)."""
    root = tmp_path / "live"
    root.mkdir()
    return root
