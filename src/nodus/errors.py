"""Every error nodus reports to a user, in one tree.

Each leaf knows the exit status the command line ends with and builds its own message, so the
CLI prints ``str(error)`` and exits with ``error.exit_status``; a user never sees a traceback.

    NodusError (1)
    ├── RefusedError (2)                 the input was refused; nothing was started
    │   ├── WorkloadError (2)            a workload file broke one or more rules (all listed)
    │   ├── UsageError (2)               a command line that cannot be carried out
    │   └── NotFoundError (2)            a run, snapshot or step that does not exist
    ├── StoreError (1)                   the snapshot store could not do what was asked
    │   ├── StoreUnreachableError (1)    the store's client failed (network, credentials, access)
    │   ├── SnapshotDamagedError (1)     a committed snapshot whose files are missing or altered
    │   └── UnsafePathError (1)          a manifest path that would escape the restore target
    ├── StaleAttemptError (1)            a superseded attempt tried to commit (fencing)
    ├── CatalogError (1)                 the run catalog is damaged or locked
    ├── PhaseTransitionError (1)         a change of a run's phase its lifecycle refuses (a bug)
    ├── WaitTimeoutError (1)             a run did not stop within the time given to wait
    ├── PausedError (3)                  the run is paused or interrupted and can be resumed
    └── AlreadyRunningError (5)          another runner holds this run

The exit statuses of a run's own phases (0 succeeded … 4 cancelled) are in
:class:`nodus.runner.catalog.phases.Phase`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AlreadyRunningError",
    "CatalogError",
    "NodusError",
    "NotFoundError",
    "PausedError",
    "PhaseTransitionError",
    "Problem",
    "RefusedError",
    "SnapshotDamagedError",
    "StaleAttemptError",
    "StoreError",
    "StoreUnreachableError",
    "UnsafePathError",
    "UsageError",
    "WaitTimeoutError",
    "WorkloadError",
    "in_words",
    "note_secret",
    "note_url",
    "redacted",
    "redacted_values",
]

_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s?#'\"]*)@")


def redacted(text: str) -> str:
    """``text`` with every URL's password masked: ``s3://user:pass@host`` → ``s3://user:***@host``.

    Every message nodus prints or records passes a store URL through here, so a password
    written into ``--store`` or ``NODUS_STORE`` is never repeated back (docs/security.md); so
    does every string that enters the catalog (events, phase messages, attempts' details), so
    the value of a stage's ``secrets`` this process passed to a program (:func:`note_secret`)
    is masked there too.
    """
    if "://" in text:
        text = _URL_USERINFO.sub(_mask, text)
    # A client's message may repeat a password without the scheme; longest first, so a value
    # holding another is masked whole.
    for password in sorted(_PASSWORDS, key=len, reverse=True):
        text = text.replace(password, "***")
    return text


def redacted_values(value: Any) -> Any:
    """``value`` (JSON-like data: an event's details) with :func:`redacted` applied to every
    string in it, so the data stays well-formed whatever a password holds."""
    if isinstance(value, str):
        return redacted(value)
    if isinstance(value, dict):
        return {key: redacted_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted_values(item) for item in value]
    return value


_PASSWORDS: set[str] = set()
_NOTED_LENGTH = 4  # shorter passwords are masked in URLs only: "pw" would mask every "pw"


def note_secret(value: str) -> None:
    """Remember the value of a secret this process gives a program (a stage's ``secrets``), so
    that :func:`redacted` masks it in every message nodus prints or records. Held in this
    process's memory only, as the environment it came from holds it; a value shorter than four
    characters is not masked (it would mask every occurrence of those characters)."""
    if len(value) >= _NOTED_LENGTH:
        _PASSWORDS.add(value)


def note_url(url: str) -> None:
    """Remember the password of a URL this process uses (a store's), so that :func:`redacted`
    masks it wherever a message repeats it, also where a client quotes it without its URL."""
    from urllib.parse import unquote

    for match in _URL_USERINFO.finditer(url or ""):
        _user, colon, password = match.group("info").partition(":")
        if colon and len(password) >= _NOTED_LENGTH:
            _PASSWORDS.update({password, unquote(password)})


def _mask(match: re.Match[str]) -> str:
    user, colon, _password = match.group("info").partition(":")
    return f"{match.group('scheme')}{user}{':***' if colon else ''}@"


class NodusError(Exception):
    """Root of every error nodus reports; ``exit_status`` is what the CLI exits with."""

    exit_status: int = 1


class RefusedError(NodusError):
    """The input was refused before anything started."""

    exit_status = 2


@dataclass(frozen=True)
class Problem:
    """One broken rule in a workload file: where, what was found, and the rule."""

    path: str  # field path such as ``stages[1].continuity.checkpoint_paths[0]``; "" = the file
    message: str  # the rule, phrased as what to do
    value: object = None
    has_value: bool = False
    suggestion: str | None = None  # the valid word meant, where a close one exists (a key)

    def render(self, source: str | None = None) -> str:
        where = f"{source}: " if source else ""
        field = f"{self.path}: " if self.path else ""
        shown = f"{_short_repr(self.value)} — " if self.has_value else ""
        return redacted(f"{where}{field}{shown}{self.message}")

    def to_dict(self) -> dict[str, object]:
        """``nodus validate --json``'s problem: ``{path, value, fix, suggestion}``; ``value``
        is null where it is not repeated (an ``env`` value may be a credential)."""
        value = self.value if self.has_value else None
        if isinstance(value, str):
            value = redacted(value)
        return {
            "path": self.path,
            "value": value,
            "fix": redacted(self.message),
            "suggestion": self.suggestion,
        }


def _short_repr(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class WorkloadError(RefusedError):
    """A workload file broke rules; every problem is reported at once, one line each."""

    def __init__(self, problems: Sequence[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__("\n".join(p.render(source) for p in self.problems))


class UsageError(RefusedError):
    """A command line that cannot be carried out as given."""


class NotFoundError(RefusedError):
    """A run, snapshot or step named on the command line does not exist."""


class StoreError(NodusError):
    """The snapshot store could not do what was asked."""


class StoreUnreachableError(StoreError):
    """The store's client failed: no network to it, no credentials, access refused. The text
    names the store and the reason in the client's words (:func:`in_words`)."""


class SnapshotDamagedError(StoreError):
    """A committed snapshot whose files are missing or do not match their hashes."""


class UnsafePathError(StoreError):
    """A manifest path that is absolute, climbs out with ``..`` or passes through a symlink."""


class StaleAttemptError(NodusError):
    """An attempt that has been superseded tried to commit a snapshot.

    Not a :class:`StoreError`: the store works, the attempt may no longer write to it. A
    handler of store failures (``capture_failed``, ``outputs_failed``) must not take it for
    one; it ends the attempt (``runner.attempt.attempt``) or stops its uploads."""


class CatalogError(NodusError):
    """The run catalog is damaged or locked; the message says what to do."""


class PhaseTransitionError(NodusError):
    """A change of a run's phase that :mod:`nodus.runner.catalog.lifecycle` does not allow.

    Never a user's mistake: nodus asked for a move its own table refuses, and nothing was
    recorded. Nothing catches it on purpose, so the bug is seen where it happens.
    """


class WaitTimeoutError(NodusError, TimeoutError):
    """A run was still going when the time given to wait for it ran out."""


class PausedError(NodusError):
    """The run is paused or interrupted and can be resumed with ``nodus runs resume``."""

    exit_status = 3


class AlreadyRunningError(NodusError):
    """Another runner holds this run (``nodus run --key`` while it runs elsewhere)."""

    exit_status = 5


def in_words(error: BaseException) -> str:
    """A library's exception as a person reads it: its message, on one line; its class name
    only when it has no message (a user is never left with just ``NoCredentialsError``)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__
