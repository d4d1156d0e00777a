"""The directory contract: notice ``checkpoint-<step>`` folders once they stop changing.

A program without an integration publishes its state as ``$NODUS_CHECKPOINT_DIR/checkpoint-<step>``
folders (named and parsed by :mod:`nodus.protocol`). The runner cannot know when a folder is
complete, so it waits until the folder's signature (every file's relative path, size and mtime)
has stayed the same for ``settle_s``. A program that publishes by atomic rename settles after
``settle_s``; one that writes in place is captured only once it pauses writing, which is the best
a watcher can do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from nodus.protocol import checkpoint_folder, checkpoint_steps
from nodus.schemas import defaults


def signature(folder: str) -> tuple | None:
    """What changes when anything in the folder is written; None if it vanished meanwhile."""
    entries = []
    try:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                stat = os.stat(path)
                entries.append((os.path.relpath(path, folder), stat.st_size, stat.st_mtime_ns))
    except FileNotFoundError:
        return None
    return tuple(entries)


class DirectoryWatcher:
    """Reports each checkpoint step once, after its folder has settled."""

    def __init__(
        self,
        state_dir: str,
        *,
        settle_s: float | None = None,
        seen: set[int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state_dir = state_dir
        self.settle_s = defaults.settle_s() if settle_s is None else settle_s
        self.seen = set(seen or ())  # steps already handled (e.g. the restored one)
        self._clock = clock
        self._pending: dict[int, tuple[tuple | None, float]] = {}

    def poll(self) -> list[int]:
        """Steps that have just settled, ascending; each is reported once."""
        settled = []
        for step in checkpoint_steps(self.state_dir):
            if step in self.seen:
                continue
            current = signature(os.path.join(self.state_dir, checkpoint_folder(step)))
            previous = self._pending.get(step)
            if previous is None or previous[0] != current:
                self._pending[step] = (current, self._clock())
            elif current and self._clock() - previous[1] >= self.settle_s:
                settled.append(step)
        for step in settled:
            self.seen.add(step)
            self._pending.pop(step, None)
        return settled

    def mark_seen(self, step: int) -> None:
        """A step handled another way (a save record) is not reported again."""
        self.seen.add(step)
        self._pending.pop(step, None)
