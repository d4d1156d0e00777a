"""Whether a checkpoint is proven whole: what lets one written just before a death be taken.

A program killed by a signal may have been cut off in the middle of a save, so what it wrote
within the settle window before its death is not taken on time alone (the time rule of
:mod:`nodus.runner.capture.capturer`). Some checkpoints prove themselves, and those are taken
however close to the death they were written. There are three outcomes, never two:

- **torn**: something fails its format's check or the folder lacks its completing file; it is
  never taken;
- **whole**: the format proves it. A single file is proven when its format's own records
  account for every byte of it (:func:`nodus.stages.formats.whole`: a ``torch.save`` zip
  archive, safetensors, a pickle). A folder is proven when its layout names the file its
  writer writes last (:mod:`nodus.stages.layouts`: a Trainer's ``trainer_state.json``,
  Accelerate's ``random_states_<rank>.pkl`` and registered objects, a torch distributed
  checkpoint's ``.metadata``, ``[continuity] checkpoint_complete``), that file is there, is no
  older than any other file of the folder, and is proven whole itself (a JSON object that
  parses counts here; an empty ``checkpoint_complete`` marker, the usual ``touch``, holds
  nothing to cut off). An Accelerate folder needs one more thing: how many objects the program
  registers for checkpointing (Accelerate writes them after the RNG states), known from a
  folder of the run taken earlier;
- **unproven**: neither (a format of the program's own, a folder of no known layout); only
  these keep the time rule.

Every function reads only the files it is given, and says what it found in words.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from nodus.stages import formats, layouts

__all__ = ["TORN", "UNPROVEN", "WHOLE", "Proof", "of_file", "of_folder"]

TORN = "torn"
WHOLE = "whole"
UNPROVEN = "unproven"

Entry = tuple[str, int, int]  # (path relative to the folder, size, mtime in ns)


@dataclass(frozen=True)
class Proof:
    """What a checkpoint's format says of it: ``outcome`` is :data:`TORN`, :data:`WHOLE` or
    :data:`UNPROVEN`, ``why`` says so in words."""

    outcome: str
    why: str

    @property
    def whole(self) -> bool:
        return self.outcome == WHOLE


def of_file(path: str, name: str | None = None) -> Proof:
    """The proof of the single file at ``path`` (named ``name`` in its selection)."""
    name = name or os.path.basename(path)
    why = formats.torn(path, name)
    if why is not None:
        return Proof(TORN, why)
    if os.path.splitext(name)[1].lower() not in formats.CHECKED_SUFFIXES:
        # A JSON file proves only that it parses; on its own it is a program's own record.
        return Proof(UNPROVEN, "not a checkpoint format nodus checks")
    if formats.whole(path, name):
        return Proof(WHOLE, "its format accounts for every byte of it")
    return Proof(UNPROVEN, "its format cannot prove it whole")


def of_folder(
    root: str, entries: Iterable[Entry], marker: str | None = None, custom: int | None = None
) -> Proof:
    """The proof of the checkpoint folder at ``root`` holding ``entries`` (relative paths,
    sizes, mtimes); ``marker`` is ``checkpoint_complete``; ``custom``: how many objects the
    program registers for checkpointing, None while no earlier folder told."""
    entries = list(entries)
    for path, _size, _mtime in entries:
        why = formats.torn(os.path.join(root, path), path)
        if why is not None:
            return Proof(TORN, f"{path}: {why}")
    verdict = layouts.judge((path for path, _s, _m in entries), marker, custom or 0)
    if not verdict.complete:
        return Proof(TORN, f"lacks {verdict.missing}")
    if verdict.layout is None or not verdict.last:
        return Proof(UNPROVEN, "no known layout names the file written last")
    if custom is None and layouts.ACCELERATE_LAYOUT in (verdict.layout or ""):
        return Proof(
            UNPROVEN,
            "an Accelerate folder, and how many objects the program registers for "
            "checkpointing (written after the RNG states) is not known yet",
        )
    mtimes = {path: mtime for path, _size, mtime in entries}
    sizes = {path: size for path, size, _mtime in entries}
    others = [mtime for path, mtime in mtimes.items() if path not in verdict.last]
    if others and min(mtimes[name] for name in verdict.last) < max(others):
        return Proof(UNPROVEN, f"{verdict.last[0]} is older than other files of the folder")
    for name in verdict.last:
        if name == marker and sizes[name] == 0:
            continue  # an empty marker holds nothing to cut off
        if not formats.whole(os.path.join(root, name), name):
            return Proof(UNPROVEN, f"{name}, written last, cannot be proven whole by its format")
    return Proof(WHOLE, f"{', '.join(verdict.last)}, written last, is there and whole")
