"""Where an attempt runs: the stage's working copy, private folders, environment and settings.

    $NODUS_HOME/work/<run>/<stage>/
        copy/                the working copy (cwd) of every attempt of the stage: the run's
                             source with the restored selection laid over it, cleared and laid
                             out again for each attempt, always at this path
        copy/state/          NODUS_CHECKPOINT_DIR, whatever the selection
        copy/.nodus/         NODUS_CONTROL_DIR: the control files of nodus.protocol (never captured)
        previous/            the last attempt's copy, set aside while the next one is laid out
                             (on a recovery, all of it but the source files kept in place): its
                             files that verify against the restored snapshot are moved in
                             instead of copied; removed once the copy is laid out
        cache/               HF_HOME, HF_DATASETS_CACHE, XDG_CACHE_HOME, PIP_CACHE_DIR
        <attempt>/output.log everything the attempt's program printed
        <attempt>/metrics.jsonl  the metrics its program logged, as nodus read them from its
                             logs (:mod:`nodus.stages.metric_logs`): the copy is laid out again
                             for the next attempt, so what the logs held would be gone
        <attempt>/tmp/       TMPDIR; runtime/ is for rebuildable installs, outside the selection

One path and the source's own mtimes (the store restores them) mean nothing path- or
time-sensitive changes between attempts: a `datasets` fingerprint of a local data file is the
same, so the tokenized data the first attempt cached in the stage's cache is reused, not rebuilt.
Everything an attempt may scribble on outside the selection lives here, so a recovered attempt
starts from exactly the source plus the committed selection, and its caches.

Laying the source out again costs a file write per source file; a recovery instead keeps the
last attempt's source files that are still exactly as this process laid them out
(:func:`Workspace.reuse_copy`). Right after laying a copy out, the runner records each source
file's state: device, inode, mode, size, mtime and ctime. Writing a file, changing its mode or
times, renaming or linking it each set its ctime to the current time, which nothing but setting
the system clock back can undo; and a file made anew gets a new ctime too. The record keeps
only files whose ctime is older than a time read from the same drive before the record was
taken, so any later change, even one within the same tick of the drive's clock as the lay-out,
leaves a ctime unlike the recorded one. A file whose state still equals the record therefore
holds the bytes, mode and mtime that were laid out and verified, and stays where it is; every
other file (edited, chmod-ed, replaced, deleted) is written again from the store, verified;
whatever else the copy holds (what the program added, its checkpoint) is moved to
``previous/``, which is removed once the copy is laid out, and a folder whose mode was changed
gets its mode back. The record lives in the runner's memory only: a new runner lays the copy
out afresh.

TMPDIR must stay short: DataLoader workers and other ``multiprocessing`` users bind AF_UNIX
sockets under it, whose paths may not exceed 107 bytes. Under a long ``$NODUS_HOME`` an attempt's
temp folder is a private folder in the system's temp folder instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from nodus import protocol
from nodus._atomic import private_folder, write_json_atomic
from nodus.errors import note_secret
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.store.manifest import Manifest
from nodus.store.restore import layered, write_layers
from nodus.store.storage import Storage

TMPDIR_MAX = 67
"""Longest TMPDIR given to a program: ``multiprocessing`` binds its sockets at
``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`` (32 bytes more), with room to spare under the 107
bytes an AF_UNIX socket path may have."""


METRICS_FILE = "metrics.jsonl"

FileState = tuple[int, int, int, int, int, int]
"""A laid-out file as ``lstat`` sees it: device, inode, mode, size, mtime_ns, ctime_ns."""


@dataclass(frozen=True)
class LaidCopy:
    """What this process laid out as a stage's copy: from which snapshots, and each file's
    state right after (only files whose state proves them unchanged; see the module's doc)."""

    layers: tuple[str, ...]
    files: dict[str, FileState]
    folders: dict[str, int]  # each folder of those files ("" the copy itself) -> its mode


CLOCK_WAIT_S = 0.05
"""Longest wait for the drive's clock to tick past a copy just laid out; files it has not
passed are written again by the next attempt instead of kept (:func:`_states`)."""

_LAID: dict[str, LaidCopy] = {}  # the copy's path -> what this process last laid out there


def attempt_metrics(log_path: str) -> str:
    """Where an attempt's logged metrics are kept: beside its output (``log_path``)."""
    return os.path.join(os.path.dirname(log_path), METRICS_FILE)


@dataclass(frozen=True)
class Workspace:
    root: str
    """The stage's folder, shared by its attempts."""
    attempt: int = 1

    @classmethod
    def of(cls, home: str, run_id: str, stage: str, attempt: int = 1) -> Workspace:
        return cls(os.path.join(home, defaults.WORK_DIR, run_id, stage), attempt)

    @property
    def copy(self) -> str:
        return os.path.join(self.root, "copy")

    @property
    def state(self) -> str:
        return os.path.join(self.copy, protocol.STATE_DIR)

    @property
    def private(self) -> str:
        return os.path.join(self.copy, protocol.CONTROL_DIR)

    @property
    def control(self) -> protocol.ControlPaths:
        """The protocol's files in the private folder."""
        return protocol.ControlPaths(self.private)

    @property
    def cache(self) -> str:
        return os.path.join(self.root, "cache")

    @property
    def attempt_folder(self) -> str:
        return os.path.join(self.root, str(self.attempt))

    @property
    def log_path(self) -> str:
        return os.path.join(self.attempt_folder, "output.log")

    @property
    def metrics_path(self) -> str:
        return attempt_metrics(self.log_path)

    @cached_property
    def tmp(self) -> str:
        """The attempt's TMPDIR: in its folder, or a short private one when that is too long."""
        preferred = os.path.join(self.attempt_folder, "tmp")
        if len(os.fsencode(preferred)) <= TMPDIR_MAX:
            return preferred
        import tempfile  # here: a short path is the rare case, and every run imports this

        name = hashlib.sha256(os.fsencode(self.attempt_folder)).hexdigest()[:12]
        for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
            base = os.path.join(parent, f"nodus-{os.getuid()}")
            short = os.path.join(base, name)
            if len(os.fsencode(short)) <= TMPDIR_MAX and _private_folder(base):
                return short
        return preferred  # nowhere shorter: sockets under it may fail, as they would anyway

    @property
    def previous(self) -> str:
        return os.path.join(self.root, "previous")

    def set_aside_copy(self) -> str | None:
        """Move the last attempt's copy aside for a restore to take verified files from.

        One rename, so a kill at any point leaves a copy or ``previous/`` that the next
        attempt clears; a restore never takes a file from there without verifying it.
        """
        shutil.rmtree(self.previous, ignore_errors=True)
        try:
            os.rename(self.copy, self.previous)
        except FileNotFoundError:
            return None
        return self.previous

    def discard_previous(self) -> None:
        shutil.rmtree(self.previous, ignore_errors=True)

    def reset_copy(self) -> None:
        """An empty copy folder (a failed restore must not leave half a snapshot behind)."""
        _LAID.pop(self.copy, None)
        shutil.rmtree(self.copy, ignore_errors=True)
        private_folder(self.attempt_folder)  # and the run's folders, when this makes them

    def reuse_copy(self, storage: Storage, manifests: list[Manifest]) -> bool:
        """Lay the copy out as ``manifests`` over one another, keeping the last attempt's files
        that are as this process laid them out (module doc); False when that cannot serve
        (nothing recorded for these snapshots, or both copies are there) and nothing changed.

        Sorted in place: every other file and folder is moved to ``previous/`` (at its path
        there, where a restore may still take it from), and what is missing written from the
        store, verified.
        """
        laid = _LAID.pop(self.copy, None)
        files = layered(manifests)
        if laid is None or files is None or laid.layers != tuple(m.id for m in manifests):
            return False
        if os.path.lexists(self.copy):
            if os.path.lexists(self.previous):
                return False  # a second try of the restore: the copy holds what it laid out
        elif _is_folder(self.previous):
            os.rename(self.previous, self.copy)  # the caller set it aside: sort it here
        else:
            return False
        private_folder(self.attempt_folder)
        os.mkdir(self.previous)
        kept = _sort_out(self.copy, self.previous, laid)
        # A kept file's record stays true: any change to it from now on moves its ctime.
        _LAID[self.copy] = LaidCopy(laid.layers, {p: laid.files[p] for p in kept}, laid.folders)
        write_layers(storage, files, [path for path in files if path not in kept], self.copy)
        return True

    def note_copy(self, manifests: list[Manifest]) -> None:
        """Record the state of the copy's files just laid out from ``manifests`` (those that
        :meth:`reuse_copy` kept are recorded already)."""
        files = layered(manifests)
        if files is None:
            return
        layers = tuple(m.id for m in manifests)
        before = _LAID.get(self.copy)
        known = before.files if before is not None and before.layers == layers else {}
        folders = {"", *(p.rsplit("/", i)[0] for p in files for i in range(1, p.count("/") + 1))}
        modes = {f: os.lstat(os.path.join(self.copy, *f.split("/"))).st_mode for f in folders}
        written = [path for path in files if path not in known]
        _LAID[self.copy] = LaidCopy(layers, {**known, **_states(self.copy, written)}, modes)

    def make_private_folders(self) -> None:
        # Not synced into their parents: the copy is laid out anew after a power loss (what it
        # holds that counts is in the store), and the caches and TMPDIR only save time.
        for folder in (
            *_copy_folders(self.copy),
            os.path.join(self.tmp, protocol.RUNTIME_DIR),
            *(os.path.join(self.cache, name) for name in protocol.CACHE_VARIABLES.values()),
        ):
            private_folder(folder, durable=False)

    def discard_copy(self) -> None:
        """Free the disk of a paused stage; the caches and the attempt's log stay."""
        shutil.rmtree(self.copy, ignore_errors=True)
        self.discard_previous()
        self.discard_tmp()

    def discard_tmp(self) -> None:
        """Free what a finished attempt left in its temp folder; its log stays."""
        shutil.rmtree(self.tmp, ignore_errors=True)


def _states(copy: str, paths: list[str]) -> dict[str, FileState]:
    """The state of each of ``paths`` under ``copy``, for those whose ctime is older than the
    drive's clock now: a later change to one cannot leave its ctime as recorded."""
    if not paths:
        return {}
    # The clock is read first: a change after it, even one racing the reads below, sets a
    # ctime no older than ``now``, so a recorded ctime older than ``now`` is the last change.
    # Read until it has moved past the time the copy was done (one tick of the drive's clock,
    # a few milliseconds; bounded, for drives that keep times in seconds), so every file
    # laid out counts.
    done = _drive_clock(copy)
    now, give_up = done, time.monotonic() + CLOCK_WAIT_S
    while now <= done and time.monotonic() < give_up:
        now = _drive_clock(copy)
    states = {path: _state(os.lstat(os.path.join(copy, *path.split("/")))) for path in paths}
    return {path: state for path, state in states.items() if state[5] < now}


def _drive_clock(folder: str) -> int:
    """The drive's time now, as it would set a ctime: ``folder``'s, just set by a touch."""
    os.utime(folder)
    return os.lstat(folder).st_ctime_ns


def _sort_out(copy: str, aside: str, laid: LaidCopy) -> set[str]:
    """Keep under ``copy`` each file whose state is its recorded one, and the folders they
    lie in (a folder's mode set back if changed); move everything else to the same path under
    ``aside``. The paths kept. One walk, never through a symlink."""
    kept: set[str] = set()
    pending = [""]
    while pending:
        folder = pending.pop()
        here = os.path.join(copy, *folder.split("/")) if folder else copy
        info = os.lstat(here)
        if stat.S_IMODE(info.st_mode) != stat.S_IMODE(laid.folders[folder]):
            os.chmod(here, stat.S_IMODE(laid.folders[folder]))
        with os.scandir(here) as found:
            entries = list(found)
        for entry in entries:
            path = f"{folder}/{entry.name}" if folder else entry.name
            if entry.is_dir(follow_symlinks=False) and path in laid.folders:
                pending.append(path)
            elif (
                path in laid.files and _state(entry.stat(follow_symlinks=False)) == laid.files[path]
            ):
                kept.add(path)
            else:
                parent = os.path.join(aside, *folder.split("/")) if folder else aside
                os.makedirs(parent, exist_ok=True)
                os.rename(entry.path, os.path.join(parent, entry.name))
    return kept


def _state(info: os.stat_result) -> FileState:
    return (
        info.st_dev,
        info.st_ino,
        info.st_mode,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    )


def _is_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _copy_folders(copy: str) -> tuple[str, ...]:
    """The folders of a copy at ``copy`` that exist before its program starts."""
    control = protocol.ControlPaths(os.path.join(copy, protocol.CONTROL_DIR))
    return (os.path.join(copy, protocol.STATE_DIR), *control.runner_folders())


def _private_folder(path: str) -> bool:
    """Whether ``path`` is (now) a folder only this user can enter, never through a symlink."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def stage_environment(
    ws: Workspace, stage: ResolvedStage, run_id: str, attempt: int, base: dict[str, str]
) -> dict[str, str]:
    """The program's environment: the runner's, then the stage's ``env``, then nodus's own."""
    env = dict(base)
    env.update(stage.env)
    env.update(
        protocol.program_environment(
            state=ws.state,
            control=ws.private,
            tmp=ws.tmp,
            cache=ws.cache,
            run_id=run_id,
            stage=stage.name,
            attempt=attempt,
        )
    )
    if stage.integration in protocol.INTEGRATIONS:
        bootstrap = _bootstrap_dir()
        if bootstrap:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (bootstrap, env.get("PYTHONPATH", "")) if p
            )
    return env


class MissingSecretError(Exception):
    """A secret the stage names is not in the environment of the process driving the attempt;
    the attempt fails with this text, like a command that cannot start."""


def secret_environment(stage: ResolvedStage, environ: Mapping[str, str]) -> dict[str, str]:
    """The stage's ``secrets``, valued from ``environ`` (the driving process's own environment:
    the runner, or the node runner of a Ray attempt). The values go into the program's
    environment and nowhere else; only the names were ever stored (docs/security.md)."""
    missing = [name for name in stage.secrets if name not in environ]
    if missing:
        names = ", ".join(missing)
        raise MissingSecretError(
            f"secret{'s' if len(missing) > 1 else ''} {names} of stage '{stage.name}' "
            f"{'are' if len(missing) > 1 else 'is'} not set in the environment of the nodus "
            f"process driving this attempt (on {socket.gethostname()}); set "
            f"{'them' if len(missing) > 1 else 'it'} in the environment `nodus run` or "
            "`nodus runs resume` runs in (on a Ray cluster: each node's)"
        )
    values = {name: environ[name] for name in stage.secrets}
    for value in values.values():  # masked in every string this process records or prints
        note_secret(value)
    return values


def _bootstrap_dir() -> str | None:
    # Imported here: the hf package is optional at runtime and must not slow `nodus runs list`.
    try:
        from nodus.stages.hf import BOOTSTRAP_DIR
    except ImportError:
        return None
    return BOOTSTRAP_DIR


def write_integration(
    ws: Workspace,
    stage: ResolvedStage,
    run_id: str,
    attempt: int,
    restored: int | None,
    home: str,
    qualifying: bool = False,
    parent_mode: str | None = None,
    warm_start_step: int | None = None,
    node: protocol.NodePlace | None = None,
) -> None:
    """``.nodus/integration.json``: the settings the prepared Trainer reads at start.

    ``qualifying`` comes from the runner's caller (``nodus qualify``), never from a workload.
    ``parent_mode`` says the restored (or, with ``warm_start_step``, the warm-start) checkpoint
    is another run's (:mod:`nodus.runner.upkeep.lineage`). ``node``: the node of a multi-node
    stage the attempt runs on (its role's), None on one machine.
    """
    if stage.integration not in protocol.INTEGRATIONS:
        return
    settings = protocol.Settings(
        integration=stage.integration,
        save_every=stage.execution.save_every,
        save_each_epoch=stage.execution.save_each_epoch,
        max_save_overhead=(
            stage.execution.max_save_overhead
            if stage.execution.save_every == protocol.SAVE_EVERY_AUTO
            else None
        ),
        restored_step=restored,
        run_id=run_id,
        stage=stage.name,
        attempt=attempt,
        home=home,
        qualifying=qualifying,
        parent_mode=parent_mode,
        warm_start_step=warm_start_step,
        node=node,
    )
    # Written anew by every attempt's preparation: a crash of the machine ends the attempt.
    write_json_atomic(ws.control.settings, settings.to_dict(), durable=False)
