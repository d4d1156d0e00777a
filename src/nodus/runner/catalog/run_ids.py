"""Run ids, defined once: ``run_`` and 12 random hex digits.

The catalog records them and adoption tells an id from a key by its shape.
"""

from __future__ import annotations

import os
import re

RUN_ID = re.compile(r"^run_[0-9a-f]+$")
"""What :func:`new_run_id` makes (and every earlier id); anything else a user gives is a key."""


def new_run_id() -> str:
    return "run_" + os.urandom(6).hex()
