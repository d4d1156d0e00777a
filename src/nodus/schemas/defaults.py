"""Every default nodus applies, in one place.

Models, the resolver, the runner, the store and the CLI import these names; no other module
writes a default value of its own. Precedence when resolving a workload is documented in
:mod:`nodus.schemas.resolve`: command line > stage > workload > these defaults.
"""

from __future__ import annotations

import os

# --- workload file -----------------------------------------------------------------------------

CODE = "."
"""Source folder, relative to the workload file."""

STAGE_NAME = "main"
"""Name of the single stage generated when a workload has no ``[[stages]]``."""

CONTINUITY_MODE = "checkpointed"
"""Mode used when ``continuity`` is omitted, or given without ``mode``."""

RESUME_ON_INTERRUPTION = {"checkpointed": True, "restartable": False}
"""Resume flag used when it is not given, by mode. An explicit flag is kept as given."""

CHECKPOINT_PATHS = ("state",)
"""Selection used when ``checkpoint_paths`` is omitted or empty (applied at resolution only)."""

STATE_DIR = "state"
"""The dedicated state folder; ``NODUS_CHECKPOINT_DIR`` is ``<copy>/state`` whatever the selection."""

PRIVATE_DIR = ".nodus"
"""Runner-private folder in each working copy; never selectable, never captured."""

MAX_CHECKPOINT_PATHS = 64
MAX_CHECKPOINT_PATH_BYTES = 512

SAVE_EVERY = 50
"""Optimizer steps between integration saves; 0 = only at the end (and when nodus asks)."""

SAVE_EACH_EPOCH = False
KEEP_RECOVERABLE = 1
"""Newest unreferenced snapshots that keep training state."""

KEEP_ADAPTERS = 3
"""Newest snapshots that keep weights."""

MAX_RECOVERIES = 10
"""Automatic recoveries before the run fails."""

GRACE_PERIOD_S = 60.0
"""Seconds a stopping program gets (preemption notice, pause, cancel) before it is killed."""

RETENTION_DAYS = 7
"""Days a finished run's remaining snapshots are kept before ``nodus gc`` expires them."""

# --- runner ------------------------------------------------------------------------------------

SETTLE_S = 1.0
"""A directory-contract ``checkpoint-<step>`` folder is captured once unchanged for this long."""

POLL_S = 0.2
"""How often the supervisor looks at the program and its state folder."""

IGNORE_FILE = ".nodusignore"
SOURCE_EXCLUDES = (".git", PRIVATE_DIR)
"""Never part of a run's captured source."""

# --- store -------------------------------------------------------------------------------------

BLOB_GC_GRACE_S = 3600.0
"""Unreferenced blobs younger than this survive blob GC (a capture may be about to commit them)."""


def nodus_home(explicit: str | None = None) -> str:
    """``--home`` > ``$NODUS_HOME`` > ``~/.nodus``."""
    home = explicit or os.environ.get("NODUS_HOME") or os.path.join("~", ".nodus")
    return os.path.abspath(os.path.expanduser(home))


def store_url(explicit: str | None = None, home: str | None = None) -> str:
    """``--store`` > ``$NODUS_STORE`` > ``file://$NODUS_HOME/store``."""
    url = explicit or os.environ.get("NODUS_STORE")
    if url:
        return url
    return "file://" + os.path.join(nodus_home(home), "store")
