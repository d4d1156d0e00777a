"""The directory contract: notice ``checkpoint-<step>`` folders once they are settled and whole.

A program without an integration publishes its state as ``$NODUS_CHECKPOINT_DIR/checkpoint-<step>``
folders (named and parsed by :mod:`nodus.protocol`). The runner cannot see a write end, so it
waits until the folder's signature (every file's relative path, size and mtime) has stayed the
same for ``settle_s``; a folder of a known layout must also be complete
(:mod:`nodus.stages.layouts`), because a program writing in place may pause in the middle of a
save for longer than any settle time.

A folder that changes after it was captured is reported again: the program rewrote that step,
and the newer capture supersedes the older. A rewritten folder of a known layout counts as
complete again only once its last-written file was rewritten too, since the previous save's
last file stays there while the new weights are written next to it.

A selection without such folders is watched whole by the runner's capture loop; here is what
it needs of it: which of its folders are checkpoints by their names (:func:`step_folders`).
"""

from __future__ import annotations

import os
import posixpath
import stat as stat_mod
import time
from collections.abc import Callable, Iterable, Sequence

from nodus.protocol import (
    INTEGRATION_HF_TRAINER_V1,
    STATE_DIR,
    checkpoint_folder,
    checkpoint_steps,
)
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.stages import recorded_steps, step_names
from nodus.stages.layouts import Verdict, accelerate_folder, custom_objects, judge

Entry = tuple[str, int, int]
"""One file of a folder's signature: (relative ``/``-path, size, mtime in ns)."""


def signature(folder: str) -> tuple[Entry, ...] | None:
    """What changes when anything in the folder is written; None if it vanished meanwhile.

    Links are never followed: a symlink is one entry of its own (the length of its target and
    its own mtime), whatever it points at, so a loop, a dangling link or one leading out of
    the folder changes nothing here (the capture keeps or leaves it out: docs/recovery.md). A
    file that vanishes while the folder is read is left out of this reading.
    """
    entries: list[Entry] = []
    if not os.path.isdir(folder):
        return None
    pending = [""]
    while pending:
        inside = pending.pop()
        try:
            with os.scandir(os.path.join(folder, inside) if inside else folder) as listing:
                found = sorted(listing, key=lambda entry: entry.name)
        except FileNotFoundError:
            if not inside:
                return None
            continue
        except OSError:
            continue  # unreadable or replaced by a file meanwhile: read again at the next poll
        for entry in found:
            relative = f"{inside}/{entry.name}" if inside else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat_mod.S_ISDIR(info.st_mode):
                pending.append(relative)
            else:
                entries.append((relative, info.st_size, info.st_mtime_ns))
    return tuple(sorted(entries))


class DirectoryWatcher:
    """Reports each form of a checkpoint folder once, after it has settled."""

    def __init__(
        self,
        state_dir: str,
        *,
        settle_s: float | None = None,
        marker: str | None = None,
        seen: Iterable[int] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state_dir = state_dir
        self.settle_s = defaults.settle_s() if settle_s is None else settle_s
        self.marker = marker  # [continuity] checkpoint_complete
        self.clock = clock
        self.folders = False  # state/ held checkpoint folders at the last poll
        self.custom = 0  # objects registered for checkpointing in the folders captured
        self.counted = False  # a folder was captured whole: ``custom`` is the program's count
        # Folders that changed again, or went away, before they settled: saves coming closer
        # together than the settle time (said when nothing at all was captured).
        self.unsettled = 0
        self._pending: dict[int, tuple[tuple[Entry, ...], float]] = {}
        # the form each step was last reported in, and last captured in
        self._reported: dict[int, tuple[Entry, ...]] = {}
        self._captured: dict[int, tuple[Entry, ...]] = {}
        for step in seen:  # e.g. the restored step: handled as it is now
            self.handled(step)

    def poll(self) -> list[int]:
        """Steps whose folder has settled in a form not reported before, ascending."""
        settled = []
        steps = checkpoint_steps(self.state_dir)
        self.folders = bool(steps)
        for gone in set(self._pending) - set(steps):
            del self._pending[gone]
            self.unsettled += 1
        for step in steps:
            current = signature(self.folder(step))
            if not current or current == self._reported.get(step):
                continue
            previous = self._pending.get(step)
            if previous is None or previous[0] != current:
                self.unsettled += previous is not None
                self._pending[step] = (current, self.clock())
            elif self.clock() - previous[1] >= self.settle_s:
                settled.append(step)
                self._reported[step] = current
                del self._pending[step]
        return settled

    def verdict(self, step: int, entries: Iterable[Entry]) -> Verdict:
        """Whether the folder of ``step``, holding ``entries``, is a whole checkpoint."""
        entries = tuple(entries)
        found = judge((path for path, _size, _mtime in entries), self.marker, self.custom)
        earlier = self._captured.get(step)
        if not found.complete or earlier is None or earlier == entries:
            return found
        before, now = _files(earlier), _files(entries)
        stale = [name for name in found.last if name in before and before[name] == now[name]]
        if not stale:
            return found
        missing = f"a new {', '.join(stale)} (the folder is being rewritten since its capture)"
        return Verdict(found.layout, missing, found.last)

    def handled(self, step: int, entries: Iterable[Entry] | None = None) -> None:
        """``step`` is captured as ``entries`` (default: as it is now); reported only once
        it changes again."""
        if entries is None:
            entries = signature(self.folder(step)) or ()
        entries = tuple(entries)
        self._captured[step] = self._reported[step] = entries
        self._pending.pop(step, None)
        files = [path for path, _size, _mtime in entries]
        self.custom = max(self.custom, custom_objects(files))
        self.counted = self.counted or accelerate_folder(files)

    def folder(self, step: int) -> str:
        return os.path.join(self.state_dir, checkpoint_folder(step))


def _files(entries: tuple[Entry, ...]) -> dict[str, tuple[int, int]]:
    return {path: (size, mtime) for path, size, mtime in entries}


def step_folders(entries: Iterable[Entry], template: str | None = None) -> dict[str, list[str]]:
    """The folders among ``entries``' paths whose own name carries a step (``step_20``,
    ``checkpoint_3``, ``checkpoint_name``'s pattern), each with its files relative to it."""
    expression = step_names.pattern(template)
    found: dict[str, list[str]] = {}
    for path, _size, _mtime in entries:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            name = parts[depth - 1]
            named = expression.fullmatch(name) if template else expression.search(name)
            if named:
                found.setdefault("/".join(parts[:depth]), []).append("/".join(parts[depth:]))
    return found


def restored_checkpoint(
    files: Iterable[str], step: int, selected: Sequence[str], template: str | None = None
) -> str:
    """Where a snapshot at ``step`` holding ``files`` has its checkpoint, relative to the copy:
    its ``checkpoint-<step>`` folder, else the folder or file whose name carries the step,
    else the one selected path (``ckpt.pt``), else the state folder."""
    files = list(files)
    folder = f"{STATE_DIR}/{checkpoint_folder(step)}"
    if any(path.startswith(f"{folder}/") for path in files):
        return folder
    named = step_names.step_of(files, template)
    if named is not None and named.step == step:
        return named.path
    return selected[0] if len(selected) == 1 and selected[0] != "." else STATE_DIR


def holds_state(paths: Iterable[str]) -> bool:
    """Whether a selection of ``paths`` (relative to the working copy) holds the state folder,
    where the directory contract's ``checkpoint-<step>`` folders are written."""
    folders = {posixpath.normpath(path) for path in paths}
    return bool(folders & {".", STATE_DIR})


def capture_plan(stage: ResolvedStage, settle_s: float | None = None) -> list[str]:
    """When a stage's selection is captured and how its step is found, line by line
    (``nodus validate``)."""
    settle = defaults.settle_s() if settle_s is None else settle_s
    folder = f"{STATE_DIR}/{checkpoint_folder('<step>')}"  # type: ignore[arg-type]
    every = stage.execution.save_every
    epochs = ", at each epoch end" if stage.execution.save_each_epoch else ""
    saves = f"{stage.integration} saves {folder} every {every} steps{epochs}, captured at once"
    if stage.integration == INTEGRATION_HF_TRAINER_V1:
        return [saves]
    named = stage.continuity.checkpoint_name
    steps = f"checkpoint_name {named!r}" if named else step_names.KNOWN_NAMES
    key = stage.continuity.step_key
    inside = f"step_key {key!r}" if key else ", ".join(recorded_steps.STEP_KEYS)
    whole = (
        f"once unchanged for {settle:g} s and whole (step: {steps}; else in a torch.save "
        f"checkpoint {inside}; else the capture's count)"
    )
    if holds_state(stage.continuity.checkpoint_paths):
        lines = [
            f"each {folder} folder once unchanged for {settle:g} s and whole (step: its name)",
            f"without such folders, the whole selection {whole}",
        ]
    else:  # no checkpoint-<step> folder can be in it: only the selection's own names
        lines = [f"the whole selection {whole}"]
    lines.append("once more when the program exits")
    if stage.continuity.resume_args:
        lines.append("a restored attempt adds " + " ".join(stage.continuity.resume_args))
    if stage.integration is not None:  # auto: the directory contract when it is unprepared
        return [saves, "a program outside its profile:", *(f"  {line}" for line in lines)]
    return lines
