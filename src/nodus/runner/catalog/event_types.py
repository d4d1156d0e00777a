"""Every type of event a run's log can hold, listed once.

The runner's rooms, the store's capture of a live folder and the program's side
(``nodus.protocol``'s ``EVENT_*``, ingested from ``.nodus/events/``) record events under these
types; docs/cli.md ("Event types") says what each means and what its details hold.
``tests/test_docs_events.py`` checks the three agree: every type here is in that table, and every
type the code records is here. A stage's program may write events of types of its own; those
are the program's, not listed.
"""

from __future__ import annotations

from nodus import protocol

__all__ = ["EVENT_TYPES"]

EVENT_TYPES: tuple[str, ...] = (
    # the run: accepted, its phases, its source and parent, adopted from a store
    "accepted",
    "phase",
    "source_captured",
    "started_from",
    "adopted",
    "key_released",
    # attempts: how each started and ended
    "attempt_ended",
    "attempt_placed",
    "node_lost",
    "slurm_job_submitted",
    "slurm_job_attached",
    "interpreter_changed",
    "parent_restored",
    "snapshot_damaged",
    "snapshot_suspect",
    "survivor_killed",
    "process_killed",
    "preemption_notice",
    "hang_detected",
    "runner_lost",
    "pause_accepted",
    "pause_timed_out",
    "pause_ended",
    # captures
    "snapshot_committed",
    "snapshot_staged",
    "snapshot_unrecorded",
    "checkpoint_upload_skipped",
    "capture_skipped",
    "capture_failed",
    "checkpoint_incomplete",
    "checkpoint_disabled_disk",
    "capture_file_skipped",
    "capture_name_refused",
    "capture_symlink_refused",
    "restore_ignored",
    "capture_unsettled",
    "metrics_unread",
    "outputs_committed",
    "outputs_failed",
    # upkeep: retention, gc, the registry; the run's record in its store
    "snapshot_kind_deleted",
    "rotation_failed",
    "rotation_unfinished",
    "model_version_registered",
    "run_model_registered",
    "model_registration_failed",
    "run_record_failed",
    "lease_lost",
    # the program's side (hf-trainer-v1, a managed method), from .nodus/events/
    protocol.EVENT_UNPREPARED,
    protocol.EVENT_REFUSED,
    protocol.EVENT_SAVE_FAILED,
    protocol.EVENT_WARM_START,
    protocol.EVENT_CHECKPOINT_ALIGNED,
    protocol.EVENT_SAVE_CADENCE,
    protocol.EVENT_RESUME_OVERRIDDEN,
    protocol.EVENT_RESTORED_FINISHED,
    protocol.EVENT_TRAINING_ARGUMENTS,
    protocol.EVENT_DUPLICATE_SAVES,
    protocol.EVENT_UNNAMED,
)
