"""Every default nodus applies, in one place.

Models, the resolver, the runner, the store and the CLI import these names; no other module
writes a default value of its own. Precedence when resolving a workload is documented in
:mod:`nodus.schemas.resolve`: command line > stage > workload > these defaults.

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

HANG_STARTUP_S = 30 * 60.0
"""``hang_timeout``'s start-up allowance: until the program's first training progress (a step,
a save, a write into its selection), it is ended only after this long without any progress
(output included). The anchor (NVIDIA's Resiliency Extension) allows an hour before the first
heartbeat; nodus counts output as progress, so a start-up silent for half an hour is rare, and a
hang there costs half as much."""

HANG_FACTOR = 5
"""``hang_timeout = "auto"``: the timeout is this many times the longest interval between two
progress signals the stage has shown since its training started (the anchor's safety factor)."""

HANG_FLOOR_S = 10 * 60.0
"""``hang_timeout = "auto"``: never a shorter timeout than this; torch.distributed's own
collective timeout (NCCL's default), so a phase not yet seen (the first evaluation) gets ten
minutes, and a collective slower than that is already an error to torch."""
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
"""``[execution] nodes``: processes of a stage, one per Ray node."""

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


MAX_STEP_BACK = 2
"""Snapshots a stage steps past in a row when restored attempts fail before committing
anything (nodus.runner.recovery.suspects); the next such failure ends the run."""

POLL_S = 0.2
"""How often the supervisor looks at the program and its state folder."""

METRICS_READ_S = 2.0
"""How often a directory-contract program's logs are read on while it trains
(:mod:`nodus.runner.capture.metrics`); always just before a snapshot, and once at its end."""

DISK_GUARD_SNAPSHOTS = 3
"""Periodic saves stay on while this many snapshots fit in the staging disk's free space
(:mod:`nodus.runner.capture.disk_guard`); the final save always happens."""

CATALOG_FILE = "nodus.db"
"""The run catalog (SQLite) inside ``$NODUS_HOME``."""

CATALOG_BUSY_TIMEOUT_S = 30.0
"""How long a catalog write waits for another nodus process before reporting the catalog locked."""

WORK_DIR = "work"
"""Attempt working copies, logs and private temp/cache folders live under ``$NODUS_HOME/work``."""

LOCKS_DIR = "locks"
"""Run and ``--key`` locks (``flock``) live under ``$NODUS_HOME/locks``."""

RESOLVED_DIR = os.path.join("cache", "resolved")
"""Remembered workload resolutions live under ``$NODUS_HOME/cache/resolved``
(:mod:`nodus.schemas.remembered`); deleting the folder is always safe."""

RESOLVED_KEEP = 256
"""How many remembered resolutions the cache keeps: those used most recently."""

KILL_WAIT_S = 10.0
"""After SIGKILL, how long the runner waits for an attempt's processes to be reaped."""

ROTATION_STOP_S = 60.0
"""At the end of an attempt, how long the runner waits for its rotation (retention after each
commit) to finish; what it leaves undone, the next rotation or ``nodus gc`` completes."""

ROTATION_IDLE_S = 1.0
"""How often an idle rotation worker looks whether its attempt has ended; one that had nothing
left to do is not woken at the end (that would delay a recovery's next attempt)."""

TREE_SCAN_S = 0.2
"""How often an attempt's supervisor looks for new processes in its tree (each one's end it
sees at once); longer where one look at ``/proc`` costs more than 2 % of this."""

STOP_SCAN_S = 0.05
"""While an attempt's tree is being stopped, how often its supervisor signals what is left."""

LAUNCHER_EXIT_WINDOW_S = 60.0
"""A launcher (``torchrun``, ``sh -c``) that exits non-zero at most this long after a process of
its tree was killed by a signal nodus did not send is an interruption. A kill long before (a
``multiprocessing.Pool`` ending its workers) did not make it exit."""

WAIT_POLL_S = 0.5
"""How often ``nodus runs wait`` and ``runs logs --follow`` look at the catalog."""

QUEUED_ORPHAN_S = 30.0
"""A QUEUED run no runner has picked up after this long counts as having lost its runner."""

PAUSE_DEADLINE_S = 600.0
"""``nodus runs pause --deadline``: after this long a pause is marked timed out (it still waits
for the program to stop, killing it one grace period later)."""

PAUSE_ACCEPT_WAIT_S = 10.0
"""How long ``nodus runs pause`` waits for the runner to take the request up before returning."""

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

SOURCE_WARN_BYTES = 256 * 1024**2
"""A source larger than this is accepted with a warning naming its largest files."""

SOURCE_LARGEST_SHOWN = 5
"""How many of the largest files a source's size warning or refusal names."""

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

SOURCE_CREDENTIALS_SHOWN = 10
"""How many credential-looking files the warning names."""

# --- store -------------------------------------------------------------------------------------

BLOB_GC_GRACE_S = 3600.0
"""Unreferenced blobs younger than this survive blob GC (a capture may be about to commit them)."""

STORE_CHUNK_BYTES = 8 * 1024 * 1024
"""Buffer size of the one pass that copies and hashes a file (capture, restore, verify)."""

STORE_DIRECT_MIN_BYTES = 64 * 1024 * 1024
"""Files at least this large bypass the page cache on a local store's side: direct (O_DIRECT)
writes when captured, direct reads when restored. A smaller file is copied in one piece, so
nothing would overlap; it stays in the page cache, where a restore on the same machine finds it
(a 32 MiB checkpoint recovered in 0.08 s that way, 0.24 s from disk)."""

STORE_SMALL_FILE_BYTES = 1024 * 1024
"""Files smaller than this are captured by one read into memory, hashed there, and written to
the store only when it lacks their blob: a source of a thousand files already stored costs a
read each, not a copy, an fsync and a thread each. A file that takes the direct path
(``STORE_DIRECT_MIN_BYTES``) always takes it."""

STORE_DIRECT_CHUNK_BYTES = 64 * 1024 * 1024
STORE_DIRECT_BUFFERS = 4
STORE_DIRECT_THREADS = 3
"""Direct I/O: chunk size, reusable aligned buffers (held for the life of the process once a
large file was copied) and threads writing (capture) or reading (restore) the store's side;
chosen with benchmarks/capture.py on an ext4 virtio disk (3 threads beat 2 by about 8 %)."""

CAPTURE_READ_ATTEMPTS = 5
"""Reads of a file that keeps changing during capture before that capture gives up."""

CAPTURE_QUIET_S = 0.01
"""A read is trusted at once only if the file had been left alone this long when it began: a
write already under way when nodus looked has moved mtime but not yet all its bytes."""

CAPTURE_RACY_S = 1.0
"""A file modified this recently is re-read next time even if size, mtime and inode match:
a write within the file system's timestamp granularity would otherwise go unnoticed."""

SWEEP_LEASE_S = 600.0
"""A blob sweep's lock counts as abandoned (a killed GC) once this old; a live sweep renews it."""

SWEEP_WAIT_POLL_S = 0.1
"""How often a capture that found a sweep running looks again (and a deferred sweep retries)."""

SWEEP_RETRY_S = 5.0
"""How long ``finish_deletions`` and ``gc_blobs`` keep retrying a sweep deferred by running
captures or by another gc before reporting it deferred: captures come and go between
checkpoints, so a sweep that tried only once could be put off forever by a busy store."""

CAPTURE_LEASE_S = 600.0
"""A capture's intent counts as abandoned (a killed capture) once this old; a live capture
renews it, so blob GC never sweeps blobs a running capture may still name."""

STAGING_DIR = "staging"
"""Under ``$NODUS_HOME``: one local staging store per remote store URL (``staging/<hash>``). A
capture for a remote store lands there first; the uploader then sends it in the background."""

UPLOAD_THREADS = 4
"""Blobs of one snapshot uploaded at once to a remote store."""

UPLOAD_RETRY_FIRST_S = 0.5
UPLOAD_RETRY_MAX_S = 10.0
"""A failed upload request is retried after ``UPLOAD_RETRY_FIRST_S``, doubling (with jitter)
up to ``UPLOAD_RETRY_MAX_S`` between tries, for as long as the stage runs (and then for
``unrecorded_retry``)."""

UPLOAD_PROGRESS_S = 0.5
"""How often the upload queue a run's ``runs get`` shows is rewritten while bytes move."""


RECORD_QUIET_S = 0.05
RECORD_QUIET_MAX_S = 1.0
"""A run's record in the store is written once its catalog has had no change for
``RECORD_QUIET_S`` (a burst of changes is one write, after it), and at most
``RECORD_QUIET_MAX_S`` after the first change it shows."""

RUN_LEASE_S = 60.0
"""How long a runner's lease on a run (``leases/<run>.json`` in the store) lasts unless renewed;
the runner renews it every third of that. A machine that lost its runner without a trace holds
the run this long at most before another machine may take it over."""

RUN_LEASE_SETTLE_S = 2.0
"""How long a runner that wrote a lease waits before reading it back: a competitor that read
the old lease just before must have written its own by then, so exactly one sees its own."""


def run_lease_settle_s() -> float:
    """``$NODUS_LEASE_SETTLE_S`` > :data:`RUN_LEASE_SETTLE_S`."""
    return _seconds("NODUS_LEASE_SETTLE_S", RUN_LEASE_SETTLE_S)


# --- hf-trainer-v1 integration -----------------------------------------------------------------

HF_MAX_MODEL_STATE_BYTES = 4_000_000_000
"""Largest complete model state the v1 profile accepts (SPEC §6)."""

HF_IDENTITY_FILE = "nodus-identity.json"
"""Written into every integration checkpoint; checked before a resume."""

HF_COLLATION_FILE = "nodus-collation.pth"
"""Written into an integration checkpoint of a Trainer whose collator draws random numbers: the
random states its collated but not yet trained batches were built under
(:mod:`nodus.stages.hf.inprocess.collation`)."""

HF_IDENTITY_IGNORED_ARGS = (
    "output_dir",
    "logging_dir",
    "logging_steps",
    "logging_strategy",
    "logging_first_step",
    "logging_nan_inf_filter",
    "report_to",
    "run_name",
    "disable_tqdm",
    "log_level",
    "log_level_replica",
    "log_on_each_node",
    "save_steps",
    "save_strategy",
    "save_total_limit",
    "hub_token",
    "push_to_hub_token",
    "dataloader_pin_memory",
    "include_num_input_tokens_seen",
    "local_rank",
)
"""Training arguments that may differ between attempts: they never change the trained weights.
``local_rank`` differs between the ranks of one world (the world size is an identity of its own,
``processes``)."""

HF_CONTINUATION_ARGS = ("max_steps", "num_train_epochs")
"""Training arguments a run continuing another run's training state may change: its length
(``resume_from``, ``runs branch --from full-state``; docs/lineage.md)."""

QUALIFIED_FILE = "qualified.json"
"""Under $NODUS_HOME: environments this machine qualified with ``nodus qualify``."""

ENV_IGNORE_SHIPPED_QUALIFICATIONS = "NODUS_IGNORE_SHIPPED_QUALIFICATIONS"
"""Set to 1: only what ``nodus qualify`` passed on this machine qualifies an environment, not the
sets shipped with nodus (for a site that trusts its own qualification only, and for the tests
that show a refusal before qualification)."""

HF_QUALIFY_KILL_STEPS = (5, 12, 27)
"""Steps after whose save ``nodus qualify`` kills the program (12 steps per epoch: inside epoch 0,
exactly at the end of epoch 0, inside epoch 2); one more kill lands in the middle of a save."""

HF_QUALIFY_WRITE_DELAY_S = 0.5
"""``nodus qualify`` holds each save this long before it is published: a kill after the save of
step K then lands well before step K+1 is published, so the recovery resumes from exactly K."""

HF_AUTO_FIRST_EVERY = 5
"""``save_every = "auto"``: the first save of an attempt comes this many steps after its start
(or its restored step), to measure what a save costs before the cadence is chosen."""

HF_AUTO_STEP_SAMPLES = 32
"""``save_every = "auto"``: the step time saves are weighed against is the mean of this many
recent steps trained without a save in flight (``HF_AUTO_STEP_OUTLIER`` leaves some out)."""

HF_AUTO_AIM = 0.8
"""``save_every = "auto"``: the share of ``max_save_overhead`` the cadence is chosen for; the
rest is room for the error of each save's measured cost (the bound is a ceiling)."""

HF_AUTO_WARMUP_STEPS = 3
"""``save_every = "auto"``: the first steps of an attempt are slower than the rest (caches,
allocations): the intervals that end within this many steps of its start are not step-time
samples."""

HF_AUTO_FRESH_STEPS = 8
"""``save_every = "auto"``: a save is weighed once this many steps trained after its
measurement ended without a save in flight, so the step time it is weighed against includes
steps on both sides of it (the next periodic save waits for them)."""

HF_AUTO_STEP_OUTLIER = 4.0
"""``save_every = "auto"``: a step that took this many times the median step or more (an
evaluation, the machine paused) is left out of the step time saves are weighed against."""

HF_AUTO_COMMIT_WAIT_S = 60.0
"""``save_every = "auto"``: once a save is written, its measurement waits at most this long for
the runner's commit (a lost runner, a failed capture), so periodic saves never stop for one."""

HF_AUTO_SETTLE_STEPS = 5
"""``save_every = "auto"``: a save's measurement goes on this many steps after its commit,
which costs training too: the integration then removes the older checkpoint folder and the
runner's retention deletes older snapshots' files."""

HF_AUTO_COST_WEIGHT = 0.5
"""``save_every = "auto"``: weight of the newest save's measured cost in the running estimate."""

HF_AUTO_RETUNE_MARGIN = 0.2
"""``save_every = "auto"``: a cadence within the bound gives way to a more frequent one only
when that is at least this share shorter, so measurement noise does not retune every save."""


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

METHOD_LEARNING_RATE = {"sft": 2e-5, "dpo": 1e-6, "grpo": 1e-6}
"""``[method] learning_rate`` by framework: TRL's own defaults for each trainer."""

METHOD_BATCH_SIZE = 8
"""``[method] batch_size``: examples per device per micro-batch (TRL's default)."""

METHOD_GRADIENT_ACCUMULATION_STEPS = 1
METHOD_MAX_LENGTH = {"sft": 1024, "dpo": 1024, "grpo": 256}
"""``[method] max_length``: tokens per example (sft, dpo); for grpo the completion length."""

METHOD_SEED = 42
METHOD_LORA_ALPHA = 16.0
METHOD_LORA_DROPOUT = 0.05
METHOD_NUM_GENERATIONS = 8
"""``[method] num_generations``: completions per prompt (grpo; TRL's default)."""

METHOD_KL_BETA = 0.0
"""``[method] kl_beta``: the KL penalty towards the reference policy (grpo; TRL's default)."""

METHOD_OUTPUTS = ("model",)
"""Where the export stage writes the final model when the workload names no ``outputs``."""
