"""The program side of the runner <-> program protocol (docs/internals.md, "Runner ↔ stage
program").

Every file lives under ``$NODUS_CONTROL_DIR`` (``<copy>/.nodus``) and every write is atomic
(temp file, fsync, rename), because the runner reads these files while the program runs and a
torn JSON file would be read as garbage.

    integration.json      settings, written by the runner before the program starts
    requests/<n>.json     save requests from the runner: {"id": n, "then": "continue"|"stop"}
    saves/<step>.json     save records, written here after checkpoint-<step> is published
    committed.json        the newest committed step, written by the runner
    events/<n>.json       events for the run's log (integration_unprepared, integration_refused)
    tmp/                  where checkpoint folders are built before the rename into state/
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from nodus._atomic import read_json, write_json_atomic
from nodus.schemas import defaults

INTEGRATIONS = ("auto", "hf-trainer-v1")


@dataclass(frozen=True)
class Settings:
    """``integration.json``: what the runner asks of this attempt."""

    integration: str  # "auto" | "hf-trainer-v1"
    save_every: int
    save_each_epoch: bool
    restored_step: int | None
    run_id: str = ""
    stage: str = ""
    attempt: int = 0
    home: str = ""
    qualifying: bool = False  # only `nodus qualify` sets it: prepare although not yet qualified

    @property
    def explicit(self) -> bool:
        """Explicit ``hf-trainer-v1`` refuses what ``auto`` would run unprepared."""
        return self.integration == "hf-trainer-v1"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        restored = data.get("restored_step")
        return cls(
            integration=str(data.get("integration", "auto")),
            save_every=int(data.get("save_every") or 0),
            save_each_epoch=bool(data.get("save_each_epoch", False)),
            restored_step=None if restored is None else int(restored),
            run_id=str(data.get("run_id", "")),
            stage=str(data.get("stage", "")),
            attempt=int(data.get("attempt") or 0),
            home=str(data.get("home", "")),
            qualifying=bool(data.get("qualifying", False)),
        )


class ControlDir:
    """The ``.nodus`` folder of one working copy, seen from the program."""

    def __init__(self, root: str, state_dir: str) -> None:
        self.root = root
        self.state_dir = state_dir  # $NODUS_CHECKPOINT_DIR
        self._committed_mtime = 0.0
        self._committed_step = -1

    @classmethod
    def from_environment(cls) -> ControlDir:
        root = os.environ["NODUS_CONTROL_DIR"]
        state = os.environ.get("NODUS_CHECKPOINT_DIR") or os.path.join(
            os.path.dirname(root), defaults.STATE_DIR
        )
        return cls(root, state)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def settings(self) -> Settings:
        return Settings.from_dict(read_json(self.path("integration.json")))

    def tmp_dir(self) -> str:
        os.makedirs(self.path("tmp"), exist_ok=True)
        return self.path("tmp")

    # --- requests ----------------------------------------------------------------------------

    def pending_requests(self, answered: set[int]) -> list[dict[str, Any]]:
        """Requests not answered yet, oldest first; a request still being renamed is skipped."""
        folder = self.path("requests")
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            stem, ext = os.path.splitext(name)
            if ext != ".json" or not stem.isdigit() or int(stem) in answered:
                continue
            try:
                request = read_json(os.path.join(folder, name))
            except (OSError, ValueError):
                continue
            found.append(
                {"id": int(request.get("id", stem)), "then": request.get("then", "continue")}
            )
        return sorted(found, key=lambda r: r["id"])

    # --- saves, commits, events ---------------------------------------------------------------

    def write_save_record(self, record: dict[str, Any]) -> None:
        os.makedirs(self.path("saves"), exist_ok=True)
        write_json_atomic(self.path("saves", f"{record['step']}.json"), record)

    def add_answers(self, step: int, request_ids: list[int]) -> bool:
        """Answer requests with the save record of ``step``, already written; False if none.

        A request that arrives at a step already saved is answered by that save: the record is
        rewritten naming it (the runner reads a record again when it changes), and the same
        state is not written a second time.
        """
        path = self.path("saves", f"{step}.json")
        try:
            record = read_json(path)
        except (OSError, ValueError):
            return False
        record["requests"] = sorted({*record.get("requests", ()), *request_ids})
        write_json_atomic(path, record)
        return True

    def committed_step(self) -> int:
        """The newest step the runner committed, or -1; cheap enough to ask at every step end."""
        path = self.path("committed.json")
        try:
            mtime = os.stat(path).st_mtime
        except FileNotFoundError:
            return -1
        if mtime != self._committed_mtime:
            try:
                self._committed_step = int(read_json(path)["step"])
                self._committed_mtime = mtime
            except (OSError, ValueError, KeyError, TypeError):
                pass  # being replaced right now: read it at the next step end
        return self._committed_step

    def write_event(self, kind: str, details: dict[str, Any]) -> None:
        os.makedirs(self.path("events"), exist_ok=True)
        name = f"{time.time_ns()}.json"
        write_json_atomic(self.path("events", name), {"type": kind, "details": details})
