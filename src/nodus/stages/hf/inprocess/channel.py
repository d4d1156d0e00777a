"""The program side of the runner <-> program protocol, over :mod:`nodus.protocol`.

Every file lives under ``$NODUS_CONTROL_DIR`` and every write is atomic (temp file, fsync,
rename), because the runner reads these files while the program runs and a torn JSON file would
be read as garbage. The names and formats are the protocol module's; this class only reads and
writes them the way the integration needs.
"""

from __future__ import annotations

import os
import time
from typing import Any

from nodus import protocol
from nodus._atomic import read_json, write_json_atomic


class ControlDir:
    """The control folder of one working copy, seen from the program."""

    def __init__(self, root: str, state_dir: str) -> None:
        self.paths = protocol.ControlPaths(root)
        self.state_dir = state_dir  # $NODUS_CHECKPOINT_DIR
        self._committed_mtime = 0.0
        self._committed_step = -1
        self._runtime_mtime = 0.0
        self._runtime = protocol.RuntimeSettings()

    @classmethod
    def from_environment(cls) -> ControlDir:
        root = os.environ[protocol.ENV_CONTROL_DIR]
        state = os.environ.get(protocol.ENV_CHECKPOINT_DIR) or os.path.join(
            os.path.dirname(root), protocol.STATE_DIR
        )
        return cls(root, state)

    def settings(self) -> protocol.Settings:
        return protocol.Settings.from_dict(read_json(self.paths.settings))

    def tmp_dir(self) -> str:
        os.makedirs(self.paths.build, exist_ok=True)
        return self.paths.build

    # --- requests ----------------------------------------------------------------------------

    def pending_requests(self, answered: set[int]) -> list[protocol.SaveRequest]:
        """Requests not answered yet, oldest first; a request still being renamed is skipped."""
        found = []
        for number, path in protocol.numbered_records(self.paths.requests):
            if number in answered:
                continue
            try:
                found.append(protocol.SaveRequest.from_dict(read_json(path), number))
            except (OSError, ValueError):
                continue
        return sorted(found, key=lambda r: r.id)

    # --- saves, commits, events ---------------------------------------------------------------

    def write_progress(self, progress: protocol.Progress) -> None:
        """Rewritten about every second: not worth an fsync (a crash loses a second of it)."""
        write_json_atomic(self.paths.progress, progress.to_dict(), durable=False)

    def write_save_record(self, record: protocol.SaveRecord) -> None:
        os.makedirs(self.paths.saves, exist_ok=True)
        write_json_atomic(self.paths.save_record(record.step), record.to_dict())

    def add_answers(self, step: int, request_ids: list[int]) -> bool:
        """Answer requests with the save record of ``step``, already written; False if none.

        A request that arrives at a step already saved is answered by that save: the record is
        rewritten naming it (the runner reads a record again when it changes), and the same
        state is not written a second time.
        """
        path = self.paths.save_record(step)
        try:
            record = protocol.SaveRecord.from_dict(read_json(path))
        except (OSError, ValueError, KeyError):
            return False
        write_json_atomic(path, record.answering(request_ids).to_dict())
        return True

    def committed_step(self) -> int:
        """The newest step the runner committed, or -1; cheap enough to ask at every step end."""
        path = self.paths.committed
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return -1
        if mtime != self._committed_mtime:
            try:
                self._committed_step = protocol.CommitRecord.from_dict(read_json(path)).step
                self._committed_mtime = mtime
            except (OSError, ValueError, KeyError, TypeError):
                pass  # being replaced right now: read it at the next step end
        return self._committed_step

    def runtime(self) -> protocol.RuntimeSettings:
        """What the runner changed while the program runs; read again only when rewritten."""
        path = self.paths.runtime
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return self._runtime
        if mtime != self._runtime_mtime:
            try:
                self._runtime = protocol.RuntimeSettings.from_dict(read_json(path))
                self._runtime_mtime = mtime
            except (OSError, ValueError, TypeError, AttributeError):
                pass  # being replaced right now: read it at the next step end
        return self._runtime

    def write_event(self, kind: str, details: dict[str, Any]) -> None:
        os.makedirs(self.paths.events, exist_ok=True)
        event = protocol.EventRecord(type=kind, details=details)
        write_json_atomic(self.paths.event(time.time_ns()), event.to_dict())
