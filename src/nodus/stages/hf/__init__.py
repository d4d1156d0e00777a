"""The ``hf-trainer-v1`` integration: unmodified Transformers ``Trainer`` programs under nodus.

The runner only needs :data:`BOOTSTRAP_DIR` (the folder it puts first on the program's
``PYTHONPATH``), so this module imports nothing heavy; the integration itself is loaded inside
the program, when ``transformers.trainer`` is imported. See docs/hf-trainer.md.

    bootstrap/sitecustomize.py   chains to any other sitecustomize, installs the import hook
    hook.py                      patches the Trainer class when transformers.trainer loads
    session.py                   one prepared Trainer: when to save, requests, resume
    capture.py / writer.py       copy state to memory at the boundary / write it in background
    control.py                   the files of the runner <-> program protocol in .nodus/
    profile.py, identity.py      the supported profile and the identity checks
    qualification.py             qualified environments (qualified.json + $NODUS_HOME record)
    driver.py                    a minimal runner side, used by `nodus qualify` and the tests
"""

from __future__ import annotations

import os

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")
"""Absolute folder holding the ``sitecustomize.py`` the runner prepends to ``PYTHONPATH``."""

__all__ = ["BOOTSTRAP_DIR"]
