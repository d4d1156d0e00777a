"""Store fixtures: one store per test on file://, memory:// and a real S3 server on loopback.

The S3 server and its buckets are the shared fixtures of tests/conftest.py (``s3_endpoint``,
``s3_bucket``).
"""

from __future__ import annotations

import contextlib
import uuid

import pytest

from nodus.store import open_store

# A real S3 server (moto, over HTTP) is outside the quick tier.
STORE_KINDS = ("file", "memory", pytest.param("s3", marks=pytest.mark.slow))


@pytest.fixture(params=STORE_KINDS)
def store_url(request, tmp_path):
    """The URL of an empty store of each kind."""
    if request.param == "file":
        yield "file://" + str(tmp_path / "store")
    elif request.param == "memory":
        import fsspec

        name = f"nodus-{uuid.uuid4().hex[:12]}"
        yield f"memory://{name}"
        with contextlib.suppress(FileNotFoundError):
            fsspec.filesystem("memory").rm(f"/{name}", recursive=True)
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
