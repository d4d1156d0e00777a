"""The defaults users see, in one place: what each workload key defaults to, the
folders and files of a nodus home, the ``NODUS_*`` settings read from the environment.

Models, the resolver, the runner, the store and the CLI import these names. Precedence when
resolving a workload is documented in :mod:`nodus.schemas.resolve`: command line > stage >
workload > these defaults. An internal tunable (a poll interval, a timeout, a chunk size, a
threshold) is a constant beside the code it tunes, in the module that uses it (the lower one,
when two share it). One stays: ``POLL_S``, the runner's beat, which the attempt's poll loop,
the capture, the Ray relay and the asking side of a pause share across rooms that may not
import one another.

Names that are a contract rather than a tunable default (the ``state/`` and ``.nodus/`` folders,
the variables and files a program sees) belong to :mod:`nodus.protocol`.
"""

from __future__ import annotations

import math
import os

from nodus import protocol

# --- workload file -----------------------------------------------------------------------------

CODE = "."
"""Source folder, relative to the workload file."""

STAGE_NAME = "main"
"""Name of the single stage generated when a workload has no ``[[stages]]``."""

CONTINUITY_MODE = "checkpointed"
"""Mode used when ``continuity`` is omitted, or given without ``mode``."""

RESUME_ON_INTERRUPTION = {"checkpointed": True, "restartable": False}
"""Resume flag used when it is not given, by mode. An explicit flag is kept as given."""

CHECKPOINT_PATHS = (protocol.STATE_DIR,)
"""Selection used when ``checkpoint_paths`` is omitted or empty (applied at resolution only)."""

MAX_CHECKPOINT_PATHS = 64
MAX_CHECKPOINT_PATH_BYTES = 512
MAX_NAME_CHARS = 128
MAX_SECRETS = 64
"""Most variable names one level's ``secrets`` lists."""
"""Longest workload or stage name (names become folder names and snapshot ids)."""

SAVE_EVERY = 50
"""Optimizer steps between integration saves; 0 = only at the end (and when nodus asks)."""

MAX_SAVE_OVERHEAD = 0.035
"""``[execution] max_save_overhead``: with ``save_every = "auto"``, the share of training time
the integration's saves may cost; 3.5% is the bound CheckFreq (FAST '21) holds."""

SAVE_EACH_EPOCH = False
KEEP_RECOVERABLE = 1
"""Newest unreferenced snapshots that keep training state."""

KEEP_ADAPTERS = 3
"""Newest snapshots that keep weights."""

MAX_RECOVERIES = 10
"""Automatic recoveries before the run fails."""

GRACE_PERIOD_S = 60.0
"""Seconds a stopping program gets (preemption notice, pause, cancel) before it is killed."""

HANG_TIMEOUT_AUTO = "auto"
HANG_TIMEOUT_OFF = "off"
HANG_TIMEOUT = HANG_TIMEOUT_AUTO
"""``[execution] hang_timeout``: ``"auto"`` (a timeout derived from the intervals the stage's
progress has shown: :mod:`nodus.runner.recovery.hangs`), ``"off"``, or a duration."""

RETENTION_DAYS = 7
"""Days a finished run's remaining snapshots are kept before ``nodus gc`` expires them."""

UNRECORDED_RETRY_S = 15 * 60.0
"""``[execution] unrecorded_retry``: how long a stage that ended with saves not yet uploaded to a
remote store keeps retrying them before it finishes and lists them as unrecorded."""

MAX_SOURCE_BYTES = 2 * 1024**3
"""Largest source a run accepts (``[execution] max_source_bytes``): above it the run is refused
before a byte is copied, naming the largest files."""

RAY_CPUS = 1.0
"""``[execution] cpus``: CPUs Ray reserves for each process of a stage on a Ray cluster."""

RAY_MEMORY = 0
"""``[execution] memory``: bytes Ray reserves for each process of a stage; 0 reserves none."""

RAY_GPU_COUNT = 0
"""``[execution] gpu_count``: GPUs Ray reserves for each process of a stage on a Ray cluster."""

NODES = 1
"""``[execution] nodes``: processes of a stage, one per node (Ray or Slurm)."""

SLURM_SIGNAL_LEAD_S = 300.0
"""``[execution] signal_lead``: how long before a Slurm job's end (its time limit, a preemption
with a grace time) Slurm signals it, so the program saves and commits before it is killed."""

# --- runner ------------------------------------------------------------------------------------

SETTLE_S = 1.0
"""A directory-contract ``checkpoint-<step>`` folder is captured once unchanged for this long."""


def settle_s() -> float:
    """``$NODUS_SETTLE_S`` > :data:`SETTLE_S`; tests and fast-saving programs shorten it."""
    return _seconds("NODUS_SETTLE_S", SETTLE_S)


def _seconds(name: str, default: float) -> float:
    """The seconds the variable ``name`` gives (unset or empty: ``default``), or the one-line
    reason it cannot be used (a mistake of the user's, exit 2)."""
    raw = os.environ.get(name) or ""
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        from nodus.errors import UsageError

        shown = raw if len(raw) <= 40 else raw[:39] + "…"
        raise UsageError(f"{name}={shown!r}: give a number of seconds, 0 or more (or unset it)")
    return value


def check_environment() -> None:
    """The ``NODUS_*`` settings read from the environment, checked before a run is accepted or
    resumed: a bad one is refused in a line, never found by the runner later."""
    settle_s()
    run_lease_settle_s()


POLL_S = 0.2
"""The runner's beat: how often an attempt's poll loop looks at the program and its state
folder (:mod:`nodus.runner.attempt.supervise`), and how often the capture, the Ray relay and a
waiting ``runs pause`` look again."""


CATALOG_FILE = "nodus.db"
"""The run catalog (SQLite) inside ``$NODUS_HOME``."""

WORK_DIR = "work"
"""Attempt working copies, logs and private temp/cache folders live under ``$NODUS_HOME/work``."""

LOCKS_DIR = "locks"
"""Run and ``--key`` locks (``flock``) live under ``$NODUS_HOME/locks``."""

RESOLVED_DIR = os.path.join("cache", "resolved")
"""Remembered workload resolutions live under ``$NODUS_HOME/cache/resolved``
(:mod:`nodus.schemas.remembered`); deleting the folder is always safe."""


PAUSE_DEADLINE_S = 600.0
"""``nodus runs pause --deadline``: after this long a pause is marked timed out (it still waits
for the program to stop, killing it one grace period later)."""

IGNORE_FILE = ".nodusignore"
SOURCE_EXCLUDES = (".git", protocol.CONTROL_DIR)
"""Never part of a run's captured source, whatever ``.nodusignore`` says."""

SOURCE_DEFAULT_EXCLUDES = (
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ipynb_checkpoints",
    "node_modules",
    "wandb",
)
"""Folders that are never source, left out of it unless a ``!name`` line of ``.nodusignore``
brings one back: a virtual environment inside the code folder (the common layout) would
otherwise put gigabytes of packages into the store and into every attempt's working copy."""

SOURCE_CREDENTIAL_NAMES = (
    ".env",
    ".env.*",
    ".envrc",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".pypirc",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "*.pem",
    "*.p12",
    "*.pfx",
)
"""File names (``fnmatch`` patterns, at any depth) that usually hold a credential: a source
holding one is accepted with a warning naming it and ``.nodusignore``, since the source is
kept with the run in the store."""

SOURCE_CREDENTIAL_PATHS = (".aws/credentials", ".aws/config", ".docker/config.json")
"""Paths (their last parts, at any depth) that usually hold a credential, like the names above."""

# --- store -------------------------------------------------------------------------------------

STAGING_DIR = "staging"
"""Under ``$NODUS_HOME``: one local staging store per remote store URL (``staging/<hash>``). A
capture for a remote store lands there first; the uploader then sends it in the background."""


RUN_LEASE_SETTLE_S = 2.0
"""How long a runner that wrote a lease waits before reading it back: a competitor that read
the old lease just before must have written its own by then, so exactly one sees its own."""


def run_lease_settle_s() -> float:
    """``$NODUS_LEASE_SETTLE_S`` > :data:`RUN_LEASE_SETTLE_S`."""
    return _seconds("NODUS_LEASE_SETTLE_S", RUN_LEASE_SETTLE_S)


# --- hf-trainer-v1 integration -----------------------------------------------------------------

HF_IDENTITY_FILE = "nodus-identity.json"
"""Written into every integration checkpoint; checked before a resume."""

QUALIFIED_FILE = "qualified.json"
"""Under $NODUS_HOME: environments this machine qualified with ``nodus qualify``."""

ENV_IGNORE_SHIPPED_QUALIFICATIONS = "NODUS_IGNORE_SHIPPED_QUALIFICATIONS"
"""Set to 1: only what ``nodus qualify`` passed on this machine qualifies an environment, not the
sets shipped with nodus (for a site that trusts its own qualification only, and for the tests
that show a refusal before qualification)."""


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


# --- managed methods (framework shortcuts, docs/methods.md) ------------------------------------

# Each method's own defaults (``learning_rate``, ``max_length``) are its
# ``nodus.schemas.method_specs.MethodSpec``'s; those every method shares are here.

METHOD_BATCH_SIZE = 8
"""``[method] batch_size``: examples per device per micro-batch (TRL's default)."""

METHOD_GRADIENT_ACCUMULATION_STEPS = 1

METHOD_SEED = 42
METHOD_LORA_ALPHA = 16.0
METHOD_LORA_DROPOUT = 0.05
METHOD_NUM_GENERATIONS = 8
"""``[method] num_generations``: completions per prompt (grpo; TRL's default)."""

METHOD_KL_BETA = 0.0
"""``[method] kl_beta``: the KL penalty towards the reference policy (grpo; TRL's default)."""

METHOD_OUTPUTS = ("model",)
"""Where the export stage writes the final model when the workload names no ``outputs``."""
