"""A run's source: what acceptance captures from a code folder, measured before a byte is copied.

The source is the code folder less what is never source: folders such as ``.venv`` or
``__pycache__`` (``defaults.SOURCE_DEFAULT_EXCLUDES``), then the lines of an optional
``.nodusignore`` (where ``!pattern`` brings one of those back), then ``.git``, ``.nodus`` and
nodus's own home and store when they lie inside the folder, which nothing brings back. The
last pattern that matches decides (:class:`SourceExcludes`). The lines of ``.nodusignore`` are
read with gitignore's rules exactly (:class:`_IgnoreLines`, through ``pathspec``, imported only
for a folder that has such a file); nodus's own patterns keep their dict lookups.

A source is kept with its run and laid out again for every attempt, so its size is stated when a
run is accepted, a large one is pointed out naming its largest files, and one above
``[execution] max_source_bytes`` is refused. The folder is walked with the excludes in force and
its sizes summed first: a refused source costs no copy. ``nodus resolve`` shows the same.
"""

from __future__ import annotations

import fnmatch
import heapq
import os
import re
import stat
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

from nodus.errors import UsageError
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage
from nodus.schemas.units import human_bytes
from nodus.store.live_folder import Patterns, excluded, select
from nodus.store.manifest import PERMISSIONS

SOURCE_WARN_BYTES = 256 * 1024**2
"""A source larger than this is accepted with a warning naming its largest files."""

SOURCE_LARGEST_SHOWN = 5
"""How many of the largest files a source's size warning or refusal names."""

SOURCE_CREDENTIALS_SHOWN = 10
"""How many credential-looking files the warning names."""


__all__ = [
    "Source",
    "SourceExcludes",
    "SourceFile",
    "changed_since",
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
    excludes: SourceExcludes  # in force, in order: the last that matches decides
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
        if self.bytes <= SOURCE_WARN_BYTES or self.refusal():
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
        shown = self.credentials[:SOURCE_CREDENTIALS_SHOWN]
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


def excludes(code: str, private: Sequence[str] = ()) -> SourceExcludes:
    """The patterns in force for ``code``, in the order they apply (module docstring)."""
    never = list(defaults.SOURCE_EXCLUDES)
    for folder in private:
        relative = os.path.relpath(os.path.realpath(folder), os.path.realpath(code))
        if relative != "." and not relative.startswith(".."):
            never.append(relative.replace(os.sep, "/"))
    return SourceExcludes(defaults.SOURCE_DEFAULT_EXCLUDES, _ignore_file_lines(code), never)


class SourceExcludes(Sequence[str]):
    """A source's excludes: the patterns in force, in order (what ``nodus resolve`` shows), and
    the judge of each path, which :func:`nodus.store.live_folder.select` asks.

    nodus's defaults come first and the ``.nodusignore`` lines after them, so the last line that
    matches a path decides and ``!.venv`` brings a default back; what is never source comes
    last, and nothing brings it back. Without ``.nodusignore`` lines all of them are nodus's
    own patterns, compiled together as before: no ``pathspec`` is imported.
    """

    def __init__(self, first: Sequence[str], lines: Sequence[str], never: Sequence[str]) -> None:
        self._patterns = (*first, *lines, *never)
        self._ignore = _IgnoreLines(lines) if lines else None
        self._first = Patterns(first if lines else self._patterns)
        self._never = Patterns(never)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._patterns[index]

    def __len__(self) -> int:
        return len(self._patterns)

    def leaves_out(self, path: str, name: str, is_dir: bool = False) -> bool:
        """Whether this one path is left out (the folders above it were judged already)."""
        if self._ignore is None:
            return self._first.leaves_out(path, name)
        if self._never.leaves_out(path, name):
            return True
        verdict = self._ignore.verdict(path, is_dir)
        return self._first.leaves_out(path, name) if verdict is None else verdict


def _ignore_file_lines(code: str) -> list[str]:
    """The patterns of ``.nodusignore`` as git reads a line: one a line (a CRLF line's CR
    dropped), trailing spaces not escaped by a backslash removed, blank lines and ``#`` comments
    skipped. Leading spaces are part of the pattern, as for git."""
    try:
        # utf-8-sig: a byte order mark is skipped, as git does; other bytes name files as the
        # file system does (os.listdir's surrogateescape).
        with open(
            os.path.join(code, defaults.IGNORE_FILE),
            encoding="utf-8-sig",
            errors="surrogateescape",
            newline="",
        ) as handle:
            text = handle.read()
    except FileNotFoundError:
        return []
    lines = (_trim_trailing_spaces(line.removesuffix("\r")) for line in text.split("\n"))
    return [line for line in lines if line and not line.startswith("#")]


def _trim_trailing_spaces(line: str) -> str:
    """git's ``trim_trailing_spaces``: spaces at the end go, unless a backslash escapes one."""
    end = len(line)
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 1  # the escaped character, whatever it is, is kept
            end = len(line)
        elif char != " ":
            end = len(line)
        elif end == len(line):
            end = index  # the first of a run of spaces: where the line ends if none follows
        index += 1
    return line[:end]


class _IgnoreLines:
    """``.nodusignore`` lines, judged as git judges ``.gitignore`` lines.

    ``pathspec`` translates each line (escapes, ``**``, classes, a trailing ``/``); a walk from
    the top asks about each path once its folders are kept, and the last line matching that
    path itself decides. ``pathspec``'s own verdict would also count a line matching a folder
    above (``__pycache__/`` then ``!src/`` would bring ``src/__pycache__`` back, which git does
    not), so only matches of the path itself are taken (:func:`_matches_itself`).
    """

    def __init__(self, lines: Sequence[str]) -> None:
        import pathspec  # here, not at import: a run without .nodusignore never loads it

        self._rules: list[tuple[re.Pattern[str], bool]] = []
        for line in lines:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)  # re on `[[`: a literal `[`
                    patterns = pathspec.GitIgnoreSpec.from_lines([_for_pathspec(line)]).patterns
            except (ValueError, re.error):
                continue  # `a\`, a lone `!`: a line git matches nothing with
            for pattern in patterns:
                if pattern.include is not None and pattern.regex is not None:
                    self._rules.append((pattern.regex, pattern.include))
        self._rules.reverse()  # the last line that matches decides

    def verdict(self, path: str, is_dir: bool) -> bool | None:
        """True: left out; False: brought back by a ``!`` line; None: no line matches it."""
        for regex, leaves_out in self._rules:
            if _matches_itself(regex, path, is_dir):
                return leaves_out
        return None


_STARS = re.compile(r"\*{3,}")


def _for_pathspec(line: str) -> str:
    """A trimmed line as ``pathspec`` reads it the way git does.

    ``pathspec`` strips all trailing whitespace where git keeps a tab (so a tab at the end is
    given as a class), reads ``a/**/`` as ``a/`` where git means the folders under ``a``, not
    ``a`` itself nor its files (written ``a/**/*/``), and ``***`` as ``*`` where git reads any
    run of stars as ``**`` (between slashes: any depth) or ``*`` (elsewhere).
    """
    line = _STARS.sub("**", line)
    if line[-1].isspace() and line[-1] != " ":
        body = line[:-1]
        if (len(body) - len(body.rstrip("\\"))) % 2:
            body = body[:-1]  # the backslash escaping it
        line = f"{body}[{line[-1]}]"
    if line.endswith("/**/"):
        line += "*/"
    return line


def _matches_itself(regex: re.Pattern[str], path: str, is_dir: bool) -> bool:
    """Whether a ``pathspec`` pattern matches ``path`` itself, not only a folder above it.

    ``pathspec`` marks a match that stops at a folder with the group ``ps_d``: on the bare path
    such a match is of a folder above; on ``path/`` it is of the path itself as a folder (what a
    line ending in ``/`` asks for) when the mark stands at the path's end. A pattern without the
    group (``a/**``, ``*``) matches what it matches itself.
    """
    if any(match.groupdict().get("ps_d") is None for match in regex.finditer(path)):
        return True
    return is_dir and any(
        match.groupdict().get("ps_d") is not None and match.start("ps_d") == len(path)
        for match in regex.finditer(path + "/")
    )


def measure(code: str, patterns: SourceExcludes, stages: Sequence[str], limit: int) -> Source:
    """Walk ``code`` as a capture would and sum its sizes; nothing is read or copied."""
    sizes = []
    # Refused symlinks and special files are reported by the capture itself.
    for candidate in select(code, ["."], patterns, lambda _type, _details: None):
        if candidate.target is None:
            try:
                sizes.append(SourceFile(candidate.rel, os.lstat(candidate.full).st_size))
            except FileNotFoundError:
                continue  # removed since the walk: the capture will not find it either
    largest = heapq.nlargest(SOURCE_LARGEST_SHOWN, sizes, key=lambda f: f.size)
    credentials = tuple(sorted(f.path for f in sizes if looks_like_credential(f.path)))
    return Source(
        code=code,
        stages=tuple(stages),
        excludes=patterns,
        bytes=sum(f.size for f in sizes),
        files=len(sizes),
        largest=tuple(largest),
        limit=limit,
        credentials=credentials,
    )


def changed_since(code: str, patterns: SourceExcludes, captured: Sequence[Any]) -> bool:
    """Whether ``code`` now differs from a source snapshot's files (``FileEntry`` rows) as a
    capture would see it: a file added, removed, resized, touched or given other permissions,
    a link pointed elsewhere. Nothing is read but the file list and each file's ``lstat``."""
    Entry = tuple[str, int | None, int | None, int | None, str | None]
    was: set[Entry] = {
        (f.path, None, None, None, f.target)
        if f.target is not None
        else (f.path, f.size, f.mode, f.mtime_ns, None)
        for f in captured
    }
    now: set[Entry] = set()
    for candidate in select(code, ["."], patterns, lambda _type, _details: None):
        if candidate.target is not None:
            now.add((candidate.rel, None, None, None, candidate.target))
            continue
        try:
            info = os.lstat(candidate.full)
        except FileNotFoundError:
            continue  # removed since the walk
        mode = stat.S_IMODE(info.st_mode) & PERMISSIONS
        now.add((candidate.rel, info.st_size, mode, info.st_mtime_ns, None))
    return was != now


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
        relative_command = "/" in program and not os.path.isabs(program)
        if relative_command and excluded(relative, patterns[stage.code]):
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
