"""A run's source: what acceptance captures from a code folder, measured before a byte is copied.

The source is the code folder less what is never source: folders such as ``.venv`` or
``__pycache__`` (``defaults.SOURCE_DEFAULT_EXCLUDES``), then the lines of an optional
``.nodusignore`` (where ``!pattern`` brings one of those back), then ``.git``, ``.nodus`` and
nodus's own home and store when they lie inside the folder, which nothing brings back. The
last pattern that matches decides (:func:`nodus.store.live_folder.excluded`).

A source is kept with its run and laid out again for every attempt, so its size is stated when a
run is accepted, a large one is pointed out naming its largest files, and one above
``[execution] max_source_bytes`` is refused. The folder is walked with the excludes in force and
its sizes summed first: a refused source costs no copy. ``nodus resolve`` shows the same.
"""

from __future__ import annotations

import fnmatch
import heapq
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nodus.errors import UsageError
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.schemas.units import human_bytes
from nodus.store.live_folder import excluded, select

__all__ = [
    "Source",
    "SourceFile",
    "credential_warnings",
    "excludes",
    "measure",
    "private_folders",
    "refusals",
    "sources",
]


@dataclass(frozen=True)
class SourceFile:
    path: str  # "/"-separated, relative to the code folder
    size: int


@dataclass(frozen=True)
class Source:
    """One code folder as acceptance would capture it now."""

    code: str
    stages: tuple[str, ...]  # the stages that run from it
    excludes: tuple[str, ...]  # in force, in order: the last that matches decides
    bytes: int
    files: int
    largest: tuple[SourceFile, ...]  # biggest first, at most SOURCE_LARGEST_SHOWN
    limit: int  # max_source_bytes: the largest value among its stages
    credentials: tuple[str, ...] = ()  # files that look like they hold a credential

    def refusal(self) -> str | None:
        """Why a run refuses this source, or None when it is within ``limit``."""
        if self.bytes <= self.limit:
            return None
        return (
            f"the source {self.code} is {human_bytes(self.bytes)}, above [execution] "
            f"max_source_bytes = {self.limit} ({human_bytes(self.limit)}): a run refuses it before "
            "copying anything. "
            + self._advice("or raise max_source_bytes in the workload if all of it is needed")
        )

    def warning(self) -> str | None:
        """A note for a source large enough to surprise, or None."""
        if self.bytes <= defaults.SOURCE_WARN_BYTES or self.refusal():
            return None
        limit = human_bytes(self.limit)
        return (
            f"the source {self.code} is {human_bytes(self.bytes)}: it is kept with the run and "
            "copied into every attempt's working copy. "
            + self._advice(f"a run refuses a source above max_source_bytes ({limit})")
        )

    def warnings(self) -> list[str]:
        """Every note acceptance and ``nodus resolve`` print about this source."""
        return [text for text in (self.warning(), self.credential_warning()) if text]

    def credential_warning(self) -> str | None:
        """A note naming the files that look like credentials, or None when there are none."""
        if not self.credentials:
            return None
        shown = self.credentials[: defaults.SOURCE_CREDENTIALS_SHOWN]
        more = len(self.credentials) - len(shown)
        listed = ", ".join(shown) + (f" and {more} more" if more else "")
        return (
            f"the source {self.code} holds files that look like credentials ({listed}): the "
            "source is kept with the run in its store and laid out in every working copy. "
            f"Leave them out with a line each in {os.path.join(self.code, defaults.IGNORE_FILE)} "
            f"(e.g. `{shown[0]}`) and give the program its credentials through `secrets` "
            "(docs/security.md)"
        )

    def _advice(self, last: str) -> str:
        shown = "\n".join(f"  {human_bytes(f.size):>10}  {f.path}" for f in self.largest)
        example = self.largest[0].path if self.largest else "data"
        return (
            f"Its largest files:\n{shown}\nLeave out what the program does not need with a line "
            f"per file or folder in {os.path.join(self.code, defaults.IGNORE_FILE)} (e.g. "
            f"`{example}`; a folder's name leaves out all of it); {last}."
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``sources[]`` entry of ``nodus resolve``."""
        return {
            "code": self.code,
            "stages": list(self.stages),
            "excludes": list(self.excludes),
            "bytes": self.bytes,
            "files": self.files,
            "largest": [{"path": f.path, "bytes": f.size} for f in self.largest],
            "max_source_bytes": self.limit,
            "credentials": list(self.credentials),
        }


def private_folders(home: str, store_url: str) -> tuple[str, ...]:
    """nodus's own folders on this machine: a live catalog and store are never source."""
    if store_url.startswith("file://"):
        return (home, store_url[len("file://") :])
    return (home,)


def excludes(code: str, private: Sequence[str] = ()) -> list[str]:
    """The patterns in force for ``code``, in the order they apply (module docstring)."""
    patterns = list(defaults.SOURCE_DEFAULT_EXCLUDES)
    patterns += _ignore_file_lines(code)
    patterns += defaults.SOURCE_EXCLUDES
    for folder in private:
        relative = os.path.relpath(os.path.realpath(folder), os.path.realpath(code))
        if relative != "." and not relative.startswith(".."):
            patterns.append(relative.replace(os.sep, "/"))
    return patterns


def _ignore_file_lines(code: str) -> list[str]:
    """The patterns of ``.nodusignore``: one a line, blank lines and ``#`` comments skipped."""
    try:
        with open(os.path.join(code, defaults.IGNORE_FILE), encoding="utf-8") as handle:
            lines = [line.strip() for line in handle]
    except FileNotFoundError:
        return []
    return [line for line in lines if line and not line.startswith("#")]


def measure(code: str, patterns: Sequence[str], stages: Sequence[str], limit: int) -> Source:
    """Walk ``code`` as a capture would and sum its sizes; nothing is read or copied."""
    sizes = []
    # Refused symlinks and special files are reported by the capture itself.
    for candidate in select(code, ["."], patterns, lambda _type, _details: None):
        if candidate.target is None:
            try:
                sizes.append(SourceFile(candidate.rel, os.lstat(candidate.full).st_size))
            except FileNotFoundError:
                continue  # removed since the walk: the capture will not find it either
    largest = heapq.nlargest(defaults.SOURCE_LARGEST_SHOWN, sizes, key=lambda f: f.size)
    credentials = tuple(sorted(f.path for f in sizes if looks_like_credential(f.path)))
    return Source(
        code=code,
        stages=tuple(stages),
        excludes=tuple(patterns),
        bytes=sum(f.size for f in sizes),
        files=len(sizes),
        largest=tuple(largest),
        limit=limit,
        credentials=credentials,
    )


_TEMPLATES = (".example", ".sample", ".template", ".dist")


def looks_like_credential(path: str) -> bool:
    """Whether a source file's ``/``-separated path names a usual home of a credential."""
    name = path.rsplit("/", 1)[-1]
    if name.endswith(_TEMPLATES):
        return False  # `.env.example`: what a project commits for people to fill in
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in defaults.SOURCE_CREDENTIAL_NAMES):
        return True
    return any(
        path == known or path.endswith("/" + known) for known in defaults.SOURCE_CREDENTIAL_PATHS
    )


def sources(stages: Sequence[ResolvedStage], private: Sequence[str] = ()) -> list[Source]:
    """One :class:`Source` per code folder, in stage order (none is refused here).

    Stages that share a code folder share its source, so the largest ``max_source_bytes``
    among them applies.
    """
    by_code: dict[str, list[ResolvedStage]] = {}
    for stage in stages:
        by_code.setdefault(stage.code, []).append(stage)
    found = []
    for code, sharing in by_code.items():
        if not os.path.isdir(code):
            raise UsageError(f"stage {sharing[0].name!r}: code folder {code} does not exist")
        limit = max(stage.execution.max_source_bytes for stage in sharing)
        names = [stage.name for stage in sharing]
        found.append(measure(code, excludes(code, private), names, limit))
    return found


def refusals(found: Sequence[Source], stages: Sequence[ResolvedStage]) -> list[str]:
    """Why a run would refuse these sources: too large, or a command they leave out."""
    texts = [text for text in (source.refusal() for source in found) if text]
    patterns = {source.code: source.excludes for source in found}
    for stage in stages:
        program = stage.command[0] if stage.command else ""
        relative = os.path.normpath(program).replace(os.sep, "/")
        if "/" in program and not os.path.isabs(program):
            if excluded(relative, patterns[stage.code]):
                # Relative commands are found in the working copy (runner.launch).
                texts.append(
                    f"stage {stage.name!r}: command {program!r} lies in a folder the source "
                    "leaves out, so no attempt would find it; give its absolute path, or bring "
                    f"the folder back with a `!name` line in {defaults.IGNORE_FILE}"
                )
    return texts


_CREDENTIAL_PARTS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "APIKEY"})
_CREDENTIAL_PAIRS = ("API_KEY", "ACCESS_KEY", "PRIVATE_KEY", "AUTH_KEY")


def looks_like_credential_name(name: str) -> bool:
    """``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, but not
    ``TOKENIZERS_PARALLELISM``."""
    upper = name.upper()
    return bool(_CREDENTIAL_PARTS & set(upper.split("_"))) or any(
        pair in upper for pair in _CREDENTIAL_PAIRS
    )


def credential_warnings(stages: Sequence[ResolvedStage]) -> list[str]:
    """A note for each ``env`` variable whose name says it holds a credential: ``env`` values
    are stored with the run, ``secrets`` are not (docs/security.md). A warning, not a refusal:
    the name may mislead, and a dummy value is harmless."""
    names: dict[str, list[str]] = {}
    for stage in stages:
        for name in stage.env:
            if looks_like_credential_name(name):
                names.setdefault(name, []).append(stage.name)
    return [
        f"env {name} (stage{'s' if len(where) > 1 else ''} {', '.join(where)}) looks like a "
        "credential: env values are stored with the run, in the catalog and in the run's "
        f'record in its store; give it as secrets = ["{name}"] and set it in the environment '
        "nodus runs in (docs/security.md)"
        for name, where in names.items()
    ]
