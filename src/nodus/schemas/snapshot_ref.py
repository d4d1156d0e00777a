"""The grammar of a snapshot reference: ``ID``, ``RUN@STEP`` or ``RUN/STAGE@STEP``.

A workload's ``resume_from`` and the snapshot commands' arguments are written this way. Parsing
is pure (no catalog, no store): :func:`parse_ref` only splits the text, and whoever resolves the
reference (``nodus.inventory.refs.Lookup``, the runner's scan for runs that reference a
snapshot) settles whether ``RUN`` is a run id, a key, or a key holding ``/``. Standard library
only, so the runner and the snapshot commands pay nothing for pydantic to use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodus.errors import UsageError

__all__ = ["SNAPSHOT_ID_PATTERN", "SnapshotRef", "is_snapshot_id", "parse_ref"]

SNAPSHOT_ID_PATTERN = r"(?:ckpt|src|out)_[0-9a-f]{16}"
"""A snapshot id: its role's prefix and 16 hex digits (built by ``nodus.store.keys``)."""

_ID = re.compile(rf"^{SNAPSHOT_ID_PATTERN}$")
_STEP = re.compile(r"^(?P<run>.+)@(?P<step>-?\d+)$")


@dataclass(frozen=True)
class SnapshotRef:
    """A parsed reference: either ``snapshot_id`` or ``run`` + ``step`` (+ ``stage``)."""

    text: str
    snapshot_id: str | None = None
    run: str | None = None
    stage: str | None = None
    step: int | None = None


def is_snapshot_id(text: str) -> bool:
    return bool(_ID.match(text))


def parse_ref(text: str) -> SnapshotRef:
    """Parse ``ID | RUN@STEP | RUN/STAGE@STEP``; UsageError (exit 2) names the forms.

    ``run`` keeps any ``/``: a run's key may hold one, so only a lookup can tell
    ``RUN/STAGE`` from a key.
    """
    text = text.strip()
    if is_snapshot_id(text):
        return SnapshotRef(text, snapshot_id=text)
    match = _STEP.match(text)
    if match is None:
        raise UsageError(
            f"snapshot {text!r}: give a snapshot id (ckpt_…), RUN@STEP or RUN/STAGE@STEP "
            "(RUN is a run id or key)"
        )
    step = int(match["step"])
    if step < 0:
        raise UsageError(f"snapshot {text!r}: the step must be 0 or more")
    return SnapshotRef(text, run=match["run"], step=step)
