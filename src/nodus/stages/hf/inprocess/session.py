"""One prepared Trainer: when to save, how to answer the runner, and how to resume.

The hook creates a :class:`Session` when a Trainer inside the profile is built. The Trainer then
calls into it at three moments: at the start of ``train()`` (resume and identity check), at every
optimizer-step end and epoch end, after the Trainer's own logging (saves and requests), and when
training ends (the final save).

In a world of several processes (:mod:`nodus.stages.hf.inprocess.world`) every rank has a
session; rank 0 decides each save and stop and the others follow it, rank 0 alone writes the
checkpoint (with every rank's RNG state), its save record and the events, and every rank checks
the identity of the checkpoint it resumes from.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, NoReturn

from nodus import protocol
from nodus.protocol import Settings
from nodus.schemas import defaults
from nodus.stages.hf.inprocess import collation as collations
from nodus.stages.hf.inprocess import identity as identities
from nodus.stages.hf.inprocess.cadence import AutoCadence
from nodus.stages.hf.inprocess.channel import ControlDir
from nodus.stages.hf.inprocess.state_copy import Buffers, capture, rng_state
from nodus.stages.hf.inprocess.state_json import StateJson
from nodus.stages.hf.inprocess.world import World, indexed_cpu_loads
from nodus.stages.hf.inprocess.writer import CheckpointWriter, remove_older_checkpoints

HF_CONTINUATION_ARGS = ("max_steps", "num_train_epochs")
"""Training arguments a run continuing another run's training state may change: its length
(``resume_from``, ``runs branch --from full-state``; docs/lineage.md)."""

_ARGUMENTS_LABEL = identities.LABELS["training_arguments"]
_WEIGHT_LABELS = (
    identities.LABELS["model_structure"],
    identities.LABELS["trainable_parameters"],
)


class Session:
    def __init__(self, trainer: Any, control: ControlDir, settings: Settings) -> None:
        self.trainer = trainer
        self.control = control
        self.settings = settings
        self.world = World()
        if self.world.size > 1 and trainer.args.device.type == "cpu":
            indexed_cpu_loads()  # or the Trainer cannot load its optimizer state on resume
        self.writer = CheckpointWriter(control, trainer, on_published=self._prune)
        self.identity: dict[str, Any] | None = None
        self.answered: set[int] = set()
        self.last_saved_step: int | None = None
        self.epoch_ending = False  # set by NodusCallback: the boundary is an epoch end
        self.saves_off_said = False
        self.arguments_said = False  # the training_arguments event is written
        self.buffers = Buffers()
        self.state_json = StateJson()
        # Saves happen only at steps that are multiples of this (grpo: generation boundaries,
        # so no checkpoint falls between a generation and the steps that use its rollouts);
        # a request arriving in between is answered at the next such step.
        self.save_granularity = 1
        self.cadence: AutoCadence | None = None  # save_every = "auto", from train() on
        self.pruned_through = 0  # the commit older checkpoint folders were last removed for
        self.restored_path: str | None = None  # the checkpoint train() resumes from
        self.restored_checked = False  # whether the restored state was seen to end training
        self.restored_finished = False
        self.collation: collations.RecordingCollator | None = None  # a masking collator's
        self.collation_restore: dict[str, Any] | None = None  # the restored checkpoint's
        self._rng_loaded = False  # the checkpoint's random state is loaded: skip the Trainer's

    # --- train() start ---------------------------------------------------------------------------

    def start(self) -> str | None:
        """Record this training's identities; return the checkpoint to resume from, if any."""
        path = self._resume_point()
        if self.world.leader and not self.arguments_said:
            # Once per attempt (a program may call train() again): what `nodus ui` shows as
            # the training arguments of this attempt.
            self.arguments_said = True
            # Every field, paths and reporting included (the identity's view leaves those
            # out); TrainingArguments.to_dict() masks its *_token fields already.
            shown = json.loads(json.dumps(self.trainer.args.to_dict(), default=str))
            self.control.write_event(protocol.EVENT_TRAINING_ARGUMENTS, {"arguments": shown})
        if path is not None:
            self.collation_restore = collations.read(path, self.world.rank)
        if self.settings.auto_cadence and self.world.leader:  # rank 0 decides every save
            self.cadence = AutoCadence(
                self.settings.max_save_overhead or defaults.MAX_SAVE_OVERHEAD,
                anchor=self.last_saved_step or 0,
                report=self._report_cadence,
            )
        return path

    def resume_from(self, given: Any, restored: str | None) -> Any:
        """What ``train()`` resumes from: the restored checkpoint on a restored attempt.

        The program's own ``resume_from_checkpoint`` (a path, or True for the newest in its
        output folder) is what its first attempt resumes from; once nodus restored one of
        this run's snapshots (a recovery, ``runs resume``) or its parent's, that is newer than
        anything the program names, and resuming from the program's would redo every step
        since: the restored checkpoint wins, and an event says so.
        """
        self.restored_path = restored
        if restored is None:
            return given
        if given not in (None, False) and given != restored and self.world.leader:
            self.control.write_event(
                protocol.EVENT_RESUME_OVERRIDDEN,
                {"given": str(given), "restored": restored, "step": self.last_saved_step},
            )
            print(
                f"nodus: resuming from the restored {restored} (step {self.last_saved_step}), "
                f"not from resume_from_checkpoint={given!r}",
                file=sys.stderr,
                flush=True,
            )
        return restored

    def finished_on_restore(self) -> bool:
        """True when the restored state is at or past the end of training: no batch is drawn.

        The Trainer draws the next batch and runs its update before it checks ``max_steps``,
        so a resume from the final checkpoint would train one step more. Asked at the first
        batch of the resumed training, when the Trainer has loaded the checkpoint's state and
        resolved ``max_steps`` (from ``max_steps`` or the epochs); the answer holds for the
        rest of ``train()``. The RNG states are loaded as the Trainer would before that batch,
        and training is told to stop, so the Trainer ends the epoch and the training as it does
        after its last step, and returns its ``TrainOutput``.
        """
        if not self.restored_checked:
            self.restored_checked = True
            state = self.trainer.state
            path = self.restored_path
            if path is not None and state.max_steps > 0 and state.global_step >= state.max_steps:
                self.restored_finished = True
                self.trainer._load_rng_state(path)
                if self.world.leader:
                    self.control.write_event(
                        protocol.EVENT_RESTORED_FINISHED,
                        {"step": state.global_step, "max_steps": state.max_steps},
                    )
                print(
                    f"nodus: the restored step {state.global_step} ends the training "
                    f"(max_steps {state.max_steps}): train() runs no further step",
                    file=sys.stderr,
                    flush=True,
                )
        if self.restored_finished:
            self.trainer.control.should_training_stop = True
        return self.restored_finished

    # --- the train loader ------------------------------------------------------------------------

    def train_dataloader(self, build: Any) -> Any:
        """The Trainer's train loader (``build()``), with what an exact resume needs.

        - A collator of the collators extension, in the main process (no workers), is wrapped
          to record the random state of every collation; on a resume from a checkpoint that
          holds pending batches, their collations are replayed (:mod:`.collation`).
        - Persistent workers: the uninterrupted run drew the workers' base seed from the main
          generator once, when epoch 0 began; a resumed attempt would draw it again, after the
          checkpoint's random state is loaded, when it first iterates the loader (a dropout
          mask shifted for the rest of the run). It starts them now, without a net draw.
        """
        trainer = self.trainer
        args = trainer.args
        collate = trainer.data_collator
        if args.dataloader_num_workers == 0 and _records_collation(collate):
            recording = collations.RecordingCollator(collate)
            trainer.data_collator = recording  # for the train loader only
            try:
                loader = build()
            finally:
                trainer.data_collator = collate
            self.collation = recording
            if self.collation_restore is not None:
                recording.restore(self.collation_restore, self._load_rng_after_replay)
                self.collation_restore = None
        else:
            loader = build()
        if (
            self.restored_path is not None
            and args.dataloader_num_workers > 0
            and args.dataloader_persistent_workers
        ):
            _start_persistent_workers(loader)
        return loader

    def batches_trained(self, count: int) -> None:
        if self.collation is not None:
            self.collation.trained(count)

    def _load_rng_after_replay(self) -> None:
        """The pending batches are rebuilt: the checkpoint's random state, once, from here."""
        self.trainer._load_rng_state(self.restored_path)
        self._rng_loaded = True

    def rng_loaded(self) -> bool:
        """True once after the session loaded the checkpoint's random state itself: the
        Trainer's own load (``rng_to_sync``) would take the later collations' draws back."""
        loaded, self._rng_loaded = self._rng_loaded, False
        return loaded

    def _report_cadence(self, every: int, overhead: float | None, step: int) -> None:
        self.control.write_event(
            protocol.EVENT_SAVE_CADENCE, {"every": every, "overhead": overhead, "step": step}
        )

    def _resume_point(self) -> str | None:
        trainer = self.trainer
        self.identity = {
            **identities.compute(trainer),
            "training_argument_values": identities.argument_values(trainer.args),
        }
        if self.settings.warm_start_step is not None:
            self._warm_start(self.settings.warm_start_step)
            return None  # fresh optimizer state: training starts at step 0
        step = self.settings.restored_step
        if step is None:
            return None
        self.last_saved_step = step
        path = os.path.join(self.control.state_dir, protocol.checkpoint_folder(step))
        if not os.path.isfile(os.path.join(path, "trainer_state.json")):
            refuse(self.control, [f"the restored checkpoint {path} is missing or incomplete"])
        saved = identities.read(path)
        if saved is None:
            refuse(
                self.control,
                [
                    f"the restored checkpoint {path} has no identity record; "
                    "it was not saved by hf-trainer-v1"
                ],
            )
        problems = identities.differences(saved, self.identity)
        if not identities.same_arguments(saved, self.identity):
            fields = identities.argument_differences(
                saved.get("training_argument_values", {}), trainer.args
            )
            if self.settings.parent_mode == protocol.FULL_STATE:
                # A run continuing another's training may train longer (or shorter).
                fields = {f: v for f, v in fields.items() if f not in HF_CONTINUATION_ARGS}
                problems = [p for p in problems if not p.startswith(_ARGUMENTS_LABEL)]
            if fields or not self.settings.parent_mode:
                named = ", ".join(
                    f"{name} (checkpoint {was!r}, now {now!r})"
                    for name, (was, now) in fields.items()
                )
                problems.append(f"changed training arguments: {named or '(unknown)'}")
        if problems:
            refuse(self.control, problems)
        return path

    def _warm_start(self, step: int) -> None:
        """Load another run's weights into the model (``runs branch --from weights``).

        Only what the weights must fit is checked: the model structure and the trainable
        parameters (when retention left the parent's identity record). Data, arguments and
        program may differ from the parent's.
        """
        path = os.path.join(self.control.state_dir, protocol.checkpoint_folder(step))
        saved = identities.read(path)
        problems = [
            line
            for line in identities.differences(saved or {}, self.identity or {})
            if saved is not None and line.startswith(_WEIGHT_LABELS)
        ]
        if problems:
            refuse(self.control, problems)
        try:
            self.trainer._load_from_checkpoint(path)
        except (OSError, ValueError, RuntimeError) as error:
            refuse(self.control, [f"the weights in {path} do not load into this model: {error}"])
        if self.world.leader:
            self.control.write_event(
                protocol.EVENT_WARM_START,
                {"checkpoint": path, "weights": identities.weights_digest(self.trainer.model)},
            )

    # --- optimizer boundaries --------------------------------------------------------------------

    def at_boundary(self) -> None:
        save, stop, ids = self._decide() if self.world.leader else (False, False, [])
        save, stop = self.world.agree(save, stop)  # every rank follows rank 0
        if save:
            self._save(ids)
        if self.world.leader:
            self._prune()
        if stop:
            self._stop()

    def _decide(self) -> tuple[bool, bool, list[int]]:
        """Whether this boundary saves, and stops after it; the requests the save answers."""
        step = self.trainer.state.global_step
        if self.cadence is not None:
            self.cadence.boundary(step, self.writer.busy(), self.control.committed_step())
        if step % self.save_granularity:
            return False, False, []
        requests = self.control.pending_requests(self.answered)
        ids = [r.id for r in requests]
        stop = any(r.stops for r in requests)
        if ids and step == self.last_saved_step and self._answer_saved(step, ids):
            return False, stop, []  # saved already: its record now answers the requests too
        return bool(self._due(step) or requests), stop, ids

    def finish(self) -> None:
        """Training ended: the final state is saved unless this step already was."""
        if self.restored_path is not None and not self.restored_checked:
            # restored at an epoch boundary at or past the end: the Trainer drew no batch
            self.finished_on_restore()
        if self.trainer.state.global_step != self.last_saved_step:
            self._save([])
        self.writer.wait()

    def _due(self, step: int) -> bool:
        if step == self.last_saved_step:
            return False
        runtime = self.control.runtime()
        if not runtime.periodic_saves:
            self._say_saves_off(runtime.reason)
            return False  # the runner's disk guard: only the final save and requests remain
        if self.epoch_ending:
            return self.settings.save_each_epoch
        if self.cadence is not None:
            return self.cadence.due(step)
        every = int(self.settings.save_every)
        return every > 0 and step % every == 0

    def _say_saves_off(self, reason: str) -> None:
        if not self.saves_off_said:
            print(f"nodus: periodic saves are off: {reason}", file=sys.stderr, flush=True)
            self.saves_off_said = True

    def _save(self, request_ids: list[int]) -> None:
        """Every rank saves together: each hands rank 0 its RNG state, rank 0 writes."""
        self.answered.update(request_ids)
        self.last_saved_step = self.trainer.state.global_step
        started = time.perf_counter()
        # As the Trainer before a save: a collective over the world's training group.
        self.trainer.store_flos()
        # Each rank's RNG state and its masking collator's pending batches (its own loader).
        collation = self.collation.saved() if self.collation is not None else None
        parts = self.world.gather((rng_state(self.trainer.args), collation))
        if parts is None:  # not rank 0: rank 0 writes the checkpoint
            return
        rng_states = [rng for rng, _ in parts]
        self.writer.wait()  # the buffers are about to be reused: the previous write must be done
        captured = capture(
            self.trainer,
            self.identity or {},
            request_ids,
            self.buffers,
            self.state_json,
            rng_states=rng_states,
        )
        if collation is not None:
            captured.collation = collations.for_ranks([saved for _, saved in parts])
        self.writer.submit(captured)
        if self.cadence is not None:
            self.cadence.saved(self.last_saved_step, time.perf_counter() - started)

    def _answer_saved(self, step: int, request_ids: list[int]) -> bool:
        self.writer.wait()  # the record of that save is written once its files are on disk
        if not self.control.add_answers(step, request_ids):
            return False
        self.answered.update(request_ids)
        return True

    def _stop(self) -> NoReturn:
        """Answer a stop request: wait until the save is on disk and recorded, then block
        (rank 0); a follower ends once rank 0 has (:meth:`World.await_leaders_end`)."""
        self.writer.wait()
        if not self.world.leader:
            self.world.await_leaders_end()
            print(
                f"nodus: rank {self.world.rank} stops with rank 0 (the world stopped after "
                "its save)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)  # the world's collectives are broken: nothing of it may run on
        while True:  # the runner captures, commits and ends the process group itself
            time.sleep(3600)

    def _prune(self, _published_step: int | None = None) -> None:
        """Older local checkpoints go once a newer snapshot is committed (never before): once
        per commit, not by listing the folder at every step (a cost of saving that no save's
        measurement would see)."""
        committed = self.control.committed_step()
        if committed > self.pruned_through:
            remove_older_checkpoints(self.control.state_dir, committed)
            self.pruned_through = committed


def _records_collation(collate: Any) -> bool:
    """One of the collators extension's classes, exactly (not a class of the same name from
    elsewhere, such as a managed method's)."""
    from transformers.data import data_collator as library

    from nodus.stages.hf.inprocess.profile import RANDOM_OR_PADDING_COLLATORS

    kind = type(collate)
    return kind.__name__ in RANDOM_OR_PADDING_COLLATORS and (
        getattr(library, kind.__name__, None) is kind
    )


def _start_persistent_workers(loader: Any) -> None:
    """Create a persistent loader's iterator (its workers) with the main generator unchanged."""
    import torch

    base = getattr(loader, "base_dataloader", loader)
    if getattr(base, "_iterator", False) is None:
        with torch.random.fork_rng(devices=[]):
            base._iterator = base._get_iterator()


def refuse(
    control: ControlDir,
    reasons: list[str],
    kind: str = protocol.EVENT_REFUSED,
    ways: list[str] | None = None,
) -> NoReturn:
    """End the program with every reason named (message, event, non-zero exit), and the ways
    forward where a person has a choice (a program outside the profile or not qualified)."""
    control.write_event(kind, {"reasons": reasons, **({"ways_forward": ways} if ways else {})})
    lines = "\n".join(f"  - {reason}" for reason in reasons)
    if ways:
        lines += "\nways forward:\n" + "\n".join(f"  - {way}" for way in ways)
    print(f"nodus: hf-trainer-v1 refused this attempt:\n{lines}", file=sys.stderr, flush=True)
    _leave_the_world_together()
    raise SystemExit(1)  # a refused attempt failed: nodus never retries it as an interruption


def _leave_the_world_together() -> None:
    """In a world of several processes, no rank ends before all have refused.

    Every rank refuses a world larger than one (SIGTERM would otherwise reach a rank still
    building its Trainer: ``torchrun`` stops the other ranks the moment one exits, and a rank
    killed by a signal nodus did not send reads as an interruption, which nodus retries). Once
    all have arrived, each ignores that SIGTERM and exits with its own status.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    try:
        dist.barrier()
    except Exception:  # a rank gone already: nothing left to wait for
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
