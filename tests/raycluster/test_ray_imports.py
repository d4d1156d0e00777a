"""Ray is an optional extra: the CLI and the local backend never import it."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from nodus.cli import main
status = main(["validate", sys.argv[1]])
import nodus.runner.engine, nodus.runner.backends, nodus.runner.submit.claim  # the local path
loaded = sorted(name for name in sys.modules if name == "ray" or name.startswith("ray."))
print(status, loaded)
"""


def test_validate_and_the_local_backend_import_nothing_of_ray(tmp_path):
    workload = tmp_path / "w.toml"
    workload.write_text('name = "w"\ncommand = "true"\n[execution]\nbackend = "ray"\n')
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(workload)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []"
