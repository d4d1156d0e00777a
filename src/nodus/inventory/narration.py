"""What happens to a run, said as it happens: a line per interruption, per recovery and (unless
``--quiet``) per committed snapshot, for ``nodus run``, ``runs resume`` and ``runs wait``.

The lines are read from the catalog, as ``runs get`` reads it, so they say the same thing
whoever drives the run: the command itself, a background runner, a runner on another machine
sharing the home. A :class:`Narrator` remembers what it has told; :func:`narrated` looks every
``WAIT_POLL_S`` (:mod:`nodus.runner.control.outside`, as ``runs wait`` looks) from a thread of its
own (with its own catalog connection) while a call blocks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from nodus.runner.catalog.core import Catalog
from nodus.runner.control.outside import WAIT_POLL_S

__all__ = ["Narrator", "narrated"]


class Narrator:
    """The lines of what happened to ``run_id`` since the last :meth:`lines` (or creation);
    each call is given the catalog to read, so a narrator can move between threads."""

    def __init__(
        self, catalog: Catalog, run_id: str, *, snapshots: bool, history: bool = False
    ) -> None:
        self._run_id = run_id
        self._snapshots = snapshots
        stages = catalog.get_run(run_id).workload.get("stages") or []
        self._commands = {s["name"]: _shown(s.get("command") or ()) for s in stages}
        newest = catalog.events(run_id, types=("snapshot_committed",))
        self._after = newest[-1]["id"] if newest else 0  # earlier snapshots: never news
        warned = [] if history else catalog.events(run_id, types=_WARNINGS)
        self._warned_after = warned[-1]["id"] if warned else 0
        self._laid_out: set[tuple[str, int]] = set()
        self._ended: set[tuple[str, int]] = set()
        if not history:  # the attempts before this narrator are not news either
            self._scan(catalog, tell=False)

    def lines(self, catalog: Catalog) -> list[str]:
        told = set(self._laid_out)
        committed = self._committed(catalog) if self._snapshots else []
        scanned = self._scan(catalog, tell=True)
        # an attempt's snapshots are said after the line that says it started (its restore)
        before = [line for key, line in committed if key in told]
        after = [line for key, line in committed if key not in told]
        return before + scanned + after + self._warnings(catalog)

    def _warnings(self, catalog: Catalog) -> list[str]:
        """What a person must act on, whether or not snapshots are told: a restore the
        program ignored."""
        events = catalog.events(self._run_id, self._warned_after, types=_WARNINGS)
        if events:
            self._warned_after = events[-1]["id"]
        return [_ignored(e) for e in events]

    def _committed(self, catalog: Catalog) -> list[tuple[tuple[str, int], str]]:
        events = catalog.events(self._run_id, self._after, types=("snapshot_committed",))
        if events:
            self._after = events[-1]["id"]
        return [
            (
                (e["stage"], e["attempt"]),
                f"snapshot of {_label(e['details']['step'], e['details'].get('counted', False))} "
                f"committed ({e['details']['snapshot']})",
            )
            for e in events
        ]

    def _scan(self, catalog: Catalog, tell: bool) -> list[str]:
        said: list[str] = []
        stages = catalog.stages(self._run_id)
        for stage in stages:
            label = f" of stage {stage['name']!r}" if len(stages) > 1 else ""
            for attempt in stage["attempts"]:
                key = (stage["name"], attempt["number"])
                if key not in self._laid_out and (attempt["pid"] or attempt["outcome"]):
                    self._laid_out.add(key)
                    # only an attempt whose program started restored anything: one that failed
                    # before (no snapshot could be restored) is said by its end alone
                    if tell and attempt["number"] > 1 and attempt["pid"]:
                        said.append(_restoring(attempt, label, self._counted(catalog, attempt)))
                if key not in self._ended and attempt["outcome"] is not None:
                    self._ended.add(key)
                    if tell and (attempt["outcome"] != "succeeded" or self._hung(catalog, key)):
                        said.append(_ended(attempt, label, self._commands.get(stage["name"])))
        return said

    def _counted(self, catalog: Catalog, attempt: dict[str, Any]) -> bool:
        """The attempt restored a snapshot whose step is the capture's count."""
        restored = attempt["restored_snapshot"]
        if restored is None:
            return False
        return any(
            event["details"].get("snapshot") == restored and event["details"].get("counted")
            for event in catalog.events(self._run_id, types=("snapshot_committed",))
        )

    def _hung(self, catalog: Catalog, key: tuple[str, int]) -> bool:
        """The attempt that succeeded was ended as hung after its final snapshot: said too."""
        events = catalog.events(self._run_id, types=("hang_detected",))
        return any((event["stage"], event["attempt"]) == key for event in events)


_WARNINGS = ("restore_ignored",)


def _ignored(event: dict[str, Any]) -> str:
    details = event["details"]
    return (
        f"attempt {event['attempt']} of stage {event['stage']!r} restored step "
        f"{details['restored_step']} but its program saved step {details['step']}: it started "
        "over instead of reading the restored checkpoint; it must read "
        "$NODUS_RESTORED_CHECKPOINT (or take [continuity] resume_args): the run is not resuming"
    )


def _restoring(attempt: dict[str, Any], label: str, counted: bool = False) -> str:
    """``restoring step 80 (ckpt_…) → attempt 2``; ``restoring capture 3`` when counted."""
    number = attempt["number"]
    if attempt["restored_step"] is None:
        return f"attempt {number}{label} starts from the beginning: no snapshot to restore"
    return (
        f"restoring {_label(attempt['restored_step'], counted)} "
        f"({attempt['restored_snapshot']}) → attempt {number}{label}"
    )


def _label(step: int | None, counted: bool) -> str:
    from nodus.store.manifest import step_label  # off the import path of `nodus run`

    return step_label(step, counted)


def _ended(attempt: dict[str, Any], label: str, command: str | None) -> str:
    """``attempt 1 lost (pid 123: python train.py): killed by SIGKILL, …``."""
    whose = ": ".join(str(part) for part in (attempt["pid"], command) if part)
    pid = f" (pid {whose})" if attempt["pid"] else ""
    return f"attempt {attempt['number']}{label} {attempt['outcome']}{pid}: {attempt['detail']}"


def _shown(command: Any, most: int = 60) -> str:
    """A stage's command as a person recognises it: its words, cut at ``most`` characters."""
    text = command if isinstance(command, str) else " ".join(str(word) for word in command)
    return text if len(text) <= most else text[: most - 1] + "…"


@contextlib.contextmanager
def narrated(
    home: str, run_id: str, say: Callable[[str], None], *, snapshots: bool, history: bool = False
) -> Iterator[None]:
    """Say each new line about ``run_id`` while the body runs, and the last ones after it;
    ``history``: what happened to it before too (a new run has no past, ``runs wait`` tells the
    run's story so far). With ``history`` nothing is read before the body starts: the thread
    reads it all, off the path of a program's start."""
    narrator = None
    if not history:  # the present is taken now: what happens from here on is news
        catalog = Catalog(home)
        try:
            narrator = Narrator(catalog, run_id, snapshots=snapshots)
        finally:
            catalog.close()
    done = threading.Event()

    def follow() -> None:
        try:
            own = Catalog(home)  # SQLite connections stay in the thread that opened them
            told = narrator or Narrator(own, run_id, snapshots=snapshots, history=True)
        except Exception:
            return
        try:
            while True:
                stopping = done.wait(WAIT_POLL_S)  # a line lags what happened by this
                for line in told.lines(own):
                    say(line)
                if stopping:
                    return
        except Exception:
            return
        finally:
            own.close()

    thread = threading.Thread(target=follow, name=f"nodus-narrator-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
