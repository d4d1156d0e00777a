"""The runner's entry points: claim a run (accept or resume it), then drive it or detach it.

Claiming takes the run's lock, so whoever holds a :class:`Claim` is the one process allowed to
drive that run; :meth:`Claim.drive` drives it to the phase where it stops, :meth:`Claim.detach`
hands it to a background runner: the caller's entry point (the client's), started with the
arguments :mod:`nodus.runner.submit.detach` reads.

``--key`` makes ``nodus run`` idempotent for cron: the key's lock is taken first, so of two
``nodus run --key K`` started together exactly one proceeds (the other exits 5 naming the
holder). Holding the lock, the runner looks the key up: no run yet → accept one; otherwise what
continuing that run means is decided by :func:`nodus.runner.recovery.continuing.continuation`,
the one decision ``runs resume`` and an adoption from the store share: continue it with the
resolution stored when it was accepted (whatever the file says now), leave it as it stopped
(reported with its exit status), or give the key to a new run.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from nodus._atomic import create_private, private_folder
from nodus.errors import NotFoundError, UsageError
from nodus.protocol import FULL_STATE
from nodus.runner.attempt.attempt import Restore
from nodus.runner.backends import HERE, Placement
from nodus.runner.backends.base import Resumed, check_resume, check_submit
from nodus.runner.catalog.core import Catalog, Run
from nodus.runner.catalog.locks import RunLock, lock_name_for
from nodus.runner.catalog.phases import AttemptOutcome, Phase
from nodus.runner.catalog.unrecorded import unrecorded_step
from nodus.runner.engine import Runner, where_it_starts
from nodus.runner.recovery import continuing
from nodus.runner.recovery.continuing import Asker, RunFacts, Verb
from nodus.runner.remote.adoption import adopt_from_store
from nodus.runner.remote.record import StoreDriving
from nodus.runner.submit.acceptance import Accepted, accept, accept_branch
from nodus.runner.upkeep.lineage import Parent, check_continuation, find_parent
from nodus.runner.workspace.launch import device_count, resolve_stages
from nodus.runner.workspace.source import changed_since, private_folders
from nodus.runner.workspace.source import excludes as source_excludes
from nodus.schemas import defaults
from nodus.schemas.continuation import apply_changes, without_epoch_saves
from nodus.schemas.resolved import ResolvedWorkload
from nodus.store import restorable

if TYPE_CHECKING:
    from nodus.store import SnapshotStore


@dataclass
class Claim:
    """A run claimed by this process: it holds the run's lock, or none for a finished run."""

    home: str
    catalog: Catalog
    run_id: str
    lock: RunLock | None  # None: the key's run has finished and is only reported
    restore: Restore | None = None  # a resume by hand; None continues where the run stood
    placement: Placement = HERE  # `--backend`, `--ray-address` of this drive

    @property
    def finished(self) -> bool:
        return self.lock is None

    def drive(self, terminal: IO[str]) -> int:
        """Drive the run here to the phase where it stops; its exit status."""
        assert self.lock is not None, "a finished run is not driven again"
        try:
            return drive(
                self.home, self.catalog, self.run_id, terminal, self.restore, self.placement
            )
        finally:
            self.lock.release()

    def detach(self, entry: Sequence[str]) -> None:
        """Hand the run (claimed with ``detach``) to a background runner, which takes the lock
        over: the command ``entry`` (the caller's; the runner names nothing above it)."""
        assert self.lock is not None, "a finished run is not driven again"
        self.lock.release()
        spawn_detached(self.home, self.run_id, self.restore, self.placement, entry)


def open_run_store(url: str) -> SnapshotStore:
    from nodus.store import open_store

    return open_store(url)


Say = Callable[[str], None]


def claim_workload(
    home: str,
    store_url: str,
    workload: ResolvedWorkload,
    *,
    key: str | None,
    say: Say,
    detach: bool = False,
    placement: Placement = HERE,
) -> Claim:
    """``nodus run FILE [--key] [--detach]``; ``say`` tells the user what happens as it happens.

    With ``detach`` the run is claimed for a background runner (see :func:`_claimed`). A
    workload with ``resume_from`` is checked against its parent before it is accepted
    (:mod:`nodus.runner.upkeep.lineage`).
    """
    defaults.check_environment()
    if key is not None:
        _check_key(key)
    _refuse_unrecorded_retry(store_url, workload)
    continues = "resume_from" if workload.resume_from is not None else None
    check_submit(workload.stages, placement, store_url, _is_local(store_url), continues)
    catalog = Catalog(home)

    def accept_new(key: str | None) -> Accepted:
        parent = None
        if workload.resume_from is not None:
            source = find_parent(
                catalog,
                workload.resume_from,
                field="resume_from",
                mode=FULL_STATE,
                store_url=store_url,
                devices=device_count(),
            )
            check_continuation(catalog, source, workload.to_dict())
            parent = source.parent
        store = open_run_store(store_url)
        return accept(catalog, store, store_url, workload, key, home, say=say, parent=parent)

    return _claim_new(home, catalog, store_url, workload, key, say, detach, accept_new, placement)


def claim_branch(
    home: str,
    snapshot: str,
    *,
    mode: str,
    changes: dict[str, Any],
    key: str | None,
    say: Say,
    detach: bool = False,
    store_url: str | None = None,
) -> Claim:
    """``nodus runs branch SNAPSHOT --from MODE [--set KEY=VALUE]``: a new run from the
    parent's stored resolution (with ``changes``) and source, starting from ``snapshot``."""
    catalog = Catalog(home)
    devices = device_count()
    source = find_parent(
        catalog, snapshot, field="SNAPSHOT", mode=mode, store_url=store_url, devices=devices
    )
    # A full-state branch makes no epoch-end saves where it continues the parent (docs/methods.md):
    # the parent's true is turned off here, so the stored resolution says what happens.
    inherited, turned_off = without_epoch_saves(source.run.workload, source.parent.stage, mode)
    child = apply_changes(inherited, changes)
    check_continuation(catalog, source, child, epoch_field="--set execution.save_each_epoch")
    workload = ResolvedWorkload.from_dict(child)
    store_url = source.run.store
    check_submit(workload.stages, HERE, store_url, _is_local(store_url), "runs branch")
    say(
        f"branching from {source.parent.snapshot} (step {source.parent.step} of "
        f"{source.run.id}, stage {source.parent.stage!r}) --from {mode}"
    )
    if turned_off:
        say(
            f"stage {source.parent.stage!r} makes no epoch-end saves (the parent's "
            "save_each_epoch = true is off): a full-state branch goes on from its parent's "
            "position in the data, its length counted in updates"
        )
    return _claim_new(
        home,
        catalog,
        source.run.store,
        workload,
        key,
        say,
        detach,
        lambda key: accept_branch(catalog, source, workload, key),
    )


def _is_local(store_url: str) -> Callable[[], bool]:
    """Whether the store at ``store_url`` is one only this machine reaches, asked when a
    backend's check needs it."""
    return lambda: bool(open_run_store(store_url).storage.is_local)


def _claim_new(
    home: str,
    catalog: Catalog,
    store_url: str,
    workload: ResolvedWorkload,
    key: str | None,
    say: Say,
    detach: bool,
    accept_new: Callable[[str | None], Accepted],
    placement: Placement = HERE,
) -> Claim:
    """A new run (``accept_new``), or with ``key`` the key's run when it has one already."""
    if key is None:
        accepted = accept_new(None)
        lock = RunLock(home, accepted.run_id, accepted.run_id).acquire()
        say(f"accepted {accepted.run_id} ({accepted.summary})")
        return _claimed(home, catalog, accepted.run_id, lock, None, detach, placement)
    lock = RunLock(home, lock_name_for("", key), f"key {key!r}").acquire()
    existing = catalog.find_by_key(key) or _adopted(catalog, store_url, key, say)
    if existing is None:
        try:
            accepted = accept_new(key)
        except BaseException:
            lock.release()
            raise
        say(f"accepted {accepted.run_id} under key {key!r} ({accepted.summary})")
        return _claimed(home, catalog, accepted.run_id, lock, None, detach, placement)
    try:
        known = _facts(existing)
        if known.phase == Phase.FAILED and not known.program_started:
            changed = _inputs_changed(home, store_url, existing, workload)
            known = dataclasses.replace(known, inputs_changed=changed)
    except BaseException:
        lock.release()
        raise
    answer = continuing.continuation(known, Asker.KEY)
    say(answer.line)
    if answer.verb is Verb.LEAVE:
        lock.release()
        return Claim(home, catalog, existing.id, None)
    if answer.verb is Verb.NEW_RUN:
        try:
            accepted = _take_key(catalog, existing, key, accept_new)
        except BaseException:
            lock.release()
            raise
        say(f"accepted {accepted.run_id} under key {key!r} ({accepted.summary})")
        return _claimed(home, catalog, accepted.run_id, lock, None, detach, placement)
    _say_continued(existing, workload, say)
    return _claimed(home, catalog, existing.id, lock, None, detach, placement)


def _say_continued(existing: Run, workload: ResolvedWorkload, say: Say) -> None:
    """What continuing the key's run means: where it starts, and that the file is not read."""
    start = _start_note(existing)
    if start:
        say(start)
    if workload.to_dict() != existing.workload:
        say(
            f"the workload file changed since {existing.id} was accepted; keeping the "
            "resolution stored with the run (use a new --key to run the new file)"
        )


def _take_key(
    catalog: Catalog, old: Run, key: str, accept_new: Callable[[str | None], Accepted]
) -> Accepted:
    """A run that never started its program gives ``key`` up to a new run of the file; a new
    run refused at acceptance leaves the key where it was."""
    catalog.set_key(old.id, None)
    try:
        accepted = accept_new(key)
    except BaseException:
        catalog.set_key(old.id, key)
        raise
    catalog.add_event(old.id, "key_released", {"key": key, "run": accepted.run_id})
    return accepted


def _inputs_changed(home: str, store_url: str, run: Run, workload: ResolvedWorkload) -> bool:
    """Whether accepting ``workload`` now would accept something else than ``run`` did: its
    resolution, the executables the caller's PATH finds (a command not found there is refused
    here, as acceptance would), or a code folder changed since its source was captured."""
    if workload.to_dict() != run.workload:
        return True
    if resolve_stages(workload.stages, os.environ) != (run.launch or {}):
        return True
    store = open_run_store(run.store)
    private = private_folders(home, store_url)
    snapshots = {s["name"]: s["source_snapshot"] for s in run.stages}
    for stage in workload.stages:
        snapshot = snapshots.get(stage.name)
        if snapshot is None:
            return True
        files = store.get(snapshot).files
        if changed_since(stage.code, source_excludes(stage.code, private), files):
            return True
    return False


def _facts(run: Run) -> RunFacts:
    """What :func:`continuing.continuation` reads of ``run`` (read with its stages)."""
    stage = _continuing_stage(run)
    rows: list[dict[str, Any]] = next((s["attempts"] for s in run.stages if s["name"] == stage), [])
    ended = [a for a in rows if a["outcome"] is not None]
    attempts = [a for s in run.stages for a in s["attempts"]]
    return RunFacts(
        id=run.id,
        phase=run.phase,
        key=run.key,
        stopped_by=AttemptOutcome(ended[-1]["outcome"]) if ended else None,
        program_started=any(a["pid"] is not None for a in attempts),
        message=run.message,
    )


def _start_note(run: Run, step: int | None = None) -> str | None:
    """Where the continued run's stage starts, in words (:func:`continuing.start_point`);
    None before its first attempt (nothing to continue from yet)."""
    name = _continuing_stage(run)
    row = next((s for s in run.stages if s["name"] == name), None)
    if name is None or row is None or not row["attempts"]:
        return None
    if step is not None:
        return f"stage {name!r} continues from step {step}"
    stage = next(s for s in ResolvedWorkload.from_dict(run.workload).stages if s.name == name)
    parent = Parent.from_dict(run.parent)
    inherited = parent if parent is not None and parent.stage == name else None
    start, at, _ = where_it_starts(open_run_store(run.store), run.id, stage, inherited)
    line = continuing.start_line(start, name, at)
    running = row["attempts"][-1]
    job = running.get("job")
    if running["outcome"] is None and job:  # a cluster job outlives its runner
        return (
            f"attempt {running['number']} of stage {name!r} ran as {job['scheduler']} job "
            f"{job['id'] or job['name']}: supervised again if it still runs, read to its end "
            f"if it ended; if it never said how it ended, {line}"
        )
    return line


def _claimed(
    home: str,
    catalog: Catalog,
    run_id: str,
    lock: RunLock,
    restore: Restore | None,
    detach: bool,
    placement: Placement = HERE,
) -> Claim:
    """The claim; one for a background runner puts the run back in the queue first.

    Until the background runner takes the lock over, the run is QUEUED: ``runs wait`` then
    neither answers with the phase it stopped in before (PAUSED, INTERRUPTED) nor finds its
    runner gone before it had ``QUEUED_ORPHAN_S`` to start.
    """
    if detach and catalog.get_run(run_id).phase != Phase.QUEUED:
        catalog.lifecycle.move(run_id, Phase.QUEUED, message="waiting for its background runner")
    return Claim(home, catalog, run_id, lock, restore, placement)


def _check_key(key: str) -> None:
    """A key is named wherever its run is (tables, messages, cron lines): one line of text."""
    if not key.isprintable():
        raise UsageError(
            f"key {key!r}: a key holds no control characters (escape sequences, tabs, "
            "newlines), since every listing prints it"
        )


def claim_resume(
    home: str,
    ref: str,
    *,
    step: int | None,
    say: Say,
    detach: bool = False,
    store_url: str | None = None,
    placement: Placement = HERE,
) -> Claim:
    """``nodus runs resume``: continue an interrupted, paused or runner-less run by hand.

    A run this catalog does not know is looked for in the store at ``store_url`` (a new
    machine recovering a run from the store alone).
    """
    defaults.check_environment()
    catalog = Catalog(home)
    try:
        run = catalog.get_run(ref)
    except NotFoundError as error:
        found = _adopted(catalog, store_url, ref, say) if store_url else None
        if found is None:
            raise NotFoundError(f"{error}, nor in the store {store_url}") from None
        run = found
    if step is not None:
        _refuse_unrecorded(catalog, run, step)
    answer = continuing.continuation(_facts(run), Asker.RESUME)
    if answer.verb is not Verb.CONTINUE:
        raise UsageError(answer.line)
    stage = _continuing_stage(run)
    if step is not None:
        _check_step(run, stage, step)
    resolved = ResolvedWorkload.from_dict(run.workload)
    stages = resolved.stages
    continues = "runs resume" if run.parent else None
    resumed = Resumed(catalog, run, stage)
    check_resume(stages, placement, run.store, _is_local(run.store), continues, resumed)
    lock = RunLock(home, run.lock_name, run.id).acquire()
    say(answer.line)
    start = _start_note(run, step)
    if start:
        say(start)
    restore = Restore(step=step, by_hand=True)
    return _claimed(home, catalog, run.id, lock, restore, detach, placement)


def _adopted(catalog: Catalog, store_url: str, ref: str, say: Say) -> Run | None:
    """The run ``ref`` (id or key) rebuilt from the store's record, or None if it has none."""
    run = adopt_from_store(catalog, open_run_store(store_url), ref)
    if run is not None:
        say(f"{run.id} found in the store {store_url} ({run.phase}); adopted on this machine")
    return run


def _refuse_unrecorded_retry(store_url: str, workload: ResolvedWorkload) -> None:
    """``unrecorded_retry`` applies to uploads; a local store has none, so setting it there
    would be a setting without effect: refused, naming why."""
    set_for = [
        stage.name
        for stage in workload.stages
        if stage.execution.unrecorded_retry != defaults.UNRECORDED_RETRY_S
    ]
    if set_for and open_run_store(store_url).storage.is_local:
        raise UsageError(
            f"[execution] unrecorded_retry (stage {', '.join(set_for)}) applies only to a "
            f"remote store, where saves are uploaded in the background; {store_url} is local, "
            "so every save is stored when it is captured. Remove the setting, or give a "
            "remote --store"
        )


def _continuing_stage(run: Run) -> str | None:
    return next((s["name"] for s in run.stages if s["phase"] != Phase.SUCCEEDED), None)


def _check_step(run: Run, stage: str | None, step: int) -> None:
    """``--step N``: a PAUSED run, and a committed snapshot at N that holds training state."""
    manifests = open_run_store(run.store).list(run=run.id, stage=stage)
    restorable.check_step(run.id, str(stage), manifests, step)
    if run.phase != Phase.PAUSED:
        raise UsageError(
            f"--step applies only to a PAUSED run; {run.id} is {run.phase} "
            f"(`nodus runs resume {run.id}` continues from its newest snapshot)"
        )


def _refuse_unrecorded(catalog: Catalog, run: Run, step: int) -> None:
    """A save the store never received cannot be resumed from: say so, not "no snapshot"."""
    why = unrecorded_step(catalog, run, step)
    if why:
        raise UsageError(why)


def drive(
    home: str,
    catalog: Catalog,
    run_id: str,
    terminal: IO[str],
    restore: Restore | None = None,
    placement: Placement = HERE,
) -> int:
    """Drive a run whose lock the caller holds, to the phase where it stops.

    The run's lease in its store is taken first (AlreadyRunningError when another machine
    drives it) and held until the drive ends.
    """
    run = catalog.get_run(run_id)
    store = open_run_store(run.store)
    with StoreDriving(catalog, store, run) as driving:
        stopped = driving.run.phase
        if stopped.final and stopped.exit_status is not None:  # another machine finished it
            return stopped.exit_status
        runner = Runner(
            home=home,
            catalog=catalog,
            store=store,
            run=driving.run,
            terminal=terminal,
            placement=placement,
        )
        return runner.drive(restore)


def spawn_detached(
    home: str,
    run_id: str,
    restore: Restore | None,
    placement: Placement,
    entry: Sequence[str],
) -> None:
    """Start ``entry`` with the arguments :func:`nodus.runner.submit.detach.parser` reads, in
    its own session, output in the run's ``runner.log``."""
    folder = os.path.join(home, defaults.WORK_DIR, run_id)
    private_folder(folder)
    command = [*entry, run_id, "--home", home]
    command += placement.argv()
    if restore is not None and restore.step is not None:
        command += ["--step", str(restore.step)]
    if restore is not None and restore.by_hand:
        command.append("--resume")
    log_path = os.path.join(folder, "runner.log")
    with os.fdopen(create_private(log_path, os.O_WRONLY | os.O_APPEND), "ab") as log:
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
