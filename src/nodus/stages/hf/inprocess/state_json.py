"""``trainer_state.json`` as ``TrainerState.save_to_json`` writes it, at a cost that does not
grow with the run.

The Trainer serializes its whole state at every save: ``dataclasses.asdict`` (a deep copy) and
an indented ``json.dumps`` (the pure-Python encoder) of a log history that gains an entry every
``logging_steps``. This happens in the training stall, and with ``logging_steps = 1`` it becomes
the largest part of it within a thousand steps (about 11 ms at 960 entries on a 2-core machine,
against 2 ms for the rest of a small model's save).

The history only grows: the Trainer appends a new dict for each log and never edits an old one.
So each entry is converted and serialized once, and the document is assembled around the cached
texts. An entry that is no longer the same object, or has gained or lost keys, is serialized
again, with everything after it. The bytes are those of
``json.dumps(dataclasses.asdict(state), indent=2, sort_keys=True)``, which a test holds.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

_HISTORY = "log_history"


@dataclasses.dataclass
class _Box:
    """``dataclasses.asdict`` converts a field's value the way it converts a whole state: a
    value boxed in a dataclass is converted exactly as it would be inside the state."""

    value: Any


class StateJson:
    """The text of one Trainer's ``trainer_state.json``, its log history serialized once."""

    def __init__(self) -> None:
        self._entries: list[tuple[dict, int, str]] = []  # (entry, its key count, its text)

    def text(self, state: Any) -> str:
        history = state.log_history
        self._forget_changed(history)
        for entry in history[len(self._entries) :]:
            self._entries.append((entry, len(entry), _nested(_dumps(entry), depth=2)))
        fields = {}
        for field in dataclasses.fields(state):
            if field.name == _HISTORY:
                fields[field.name] = self._history_text()
            else:
                fields[field.name] = _nested(_dumps(getattr(state, field.name)), depth=1)
        body = ",\n  ".join(f"{json.dumps(name)}: {fields[name]}" for name in sorted(fields))
        return "{\n  " + body + "\n}\n"

    def _forget_changed(self, history: list[dict]) -> None:
        """Drop the cached texts from the first entry that is not the one they were made of."""
        kept = min(len(self._entries), len(history))
        for index in range(kept):
            entry, keys, _ = self._entries[index]
            if history[index] is not entry or len(entry) != keys:
                kept = index
                break
        del self._entries[kept:]

    def _history_text(self) -> str:
        if not self._entries:
            return "[]"
        return "[\n    " + ",\n    ".join(text for _, _, text in self._entries) + "\n  ]"


def _dumps(value: Any) -> str:
    return json.dumps(dataclasses.asdict(_Box(value))["value"], indent=2, sort_keys=True)


def _nested(text: str, depth: int) -> str:
    """``text``, serialized at the top, as it reads ``depth`` levels down: every line break in
    JSON is structural (strings escape theirs), so each one gains the indentation."""
    return text.replace("\n", "\n" + "  " * depth)
