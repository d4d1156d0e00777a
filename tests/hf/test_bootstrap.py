"""Point 1: the bootstrap prepares a process without code changes and keeps other customisation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from nodus.stages.hf import BOOTSTRAP_DIR

HOOKED = "print(any(type(f).__name__ == '_TrainerFinder' for f in sys.meta_path))"
PROBE = "; ".join(
    [
        "import sys, sitecustomize",
        # At start-up: nothing loaded, not even the protocol (a program without transformers
        # starts as fast as without nodus)...
        HOOKED,
        "print(sorted({'transformers', '_nodus_bootstrap_protocol'} & set(sys.modules)) or None)",
        # ...and the hook in place once the program imports transformers.
        "import transformers",
        HOOKED,
    ]
)


def _probe(tmp_path, with_settings: bool) -> list[str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SITE_RAN'] = 'yes'\n")
    control = tmp_path / ".nodus"
    control.mkdir()
    if with_settings:
        (control / "integration.json").write_text(json.dumps({"integration": "auto"}))
    env = dict(
        os.environ,
        NODUS_CONTROL_DIR=str(control),
        PYTHONPATH=os.pathsep.join([BOOTSTRAP_DIR, str(site)]),
    )
    code = PROBE + "; import os; print(os.environ.get('SITE_RAN'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split()


def test_bootstrap_chains_to_the_next_sitecustomize_and_installs_the_hook(tmp_path):
    at_start, loaded, hooked, site_ran = _probe(tmp_path, with_settings=True)
    assert site_ran == "yes"  # the site's own sitecustomize still ran
    # Nothing is imported before the program asks for transformers; then the hook is there.
    assert (at_start, loaded, hooked) == ("False", "None", "True")


def test_without_integration_settings_the_bootstrap_does_nothing(tmp_path):
    at_start, _loaded, hooked, site_ran = _probe(tmp_path, with_settings=False)
    assert at_start == hooked == "False" and site_ran == "yes"
