"""A store that cannot be reached, met while resolving a snapshot reference: named as the
store's problem (exit 2), in the client's words, never as a library's exception."""

from __future__ import annotations

import subprocess
import sys

from snapshot_helpers import Home


def test_an_unreachable_store_is_named_as_such_never_as_a_library_exception(tmp_path):
    home = Home(tmp_path / "home")
    catalog = home.catalog()
    run_id = catalog.create_run(
        name="w",
        workload={},
        store="s3://nowhere/store",
        key="far",
        lock_name="l",
        stage_names=["main"],
    )
    catalog.close()
    down = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",  # nothing listens: the store cannot be reached
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    for ref in ("ckpt_0123456789abcdef", f"{run_id}@3", "far@3"):
        proc = subprocess.run(
            [sys.executable, "-m", "nodus", "snapshots", "get", ref],
            env=home.env(down),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert "store s3://nowhere/store cannot be reached: Could not connect" in proc.stderr
        assert "Error" not in proc.stderr and "Traceback" not in proc.stderr
