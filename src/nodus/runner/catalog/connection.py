"""The catalog's connection: one SQLite file shared by several nodus processes.

Several processes use the catalog at once (a runner, ``runs wait``, ``runs cancel``, cron), so it
runs in WAL mode with a busy timeout, and every write is one short transaction. SQLite's errors
become messages that say what the user can do (a locked, full, read-only or damaged catalog).

What a command reports survives a power loss: every write is one transaction, and with
``synchronous=FULL`` SQLite fsyncs the WAL at each commit, so a run, phase, deletion or event is
on disk before the command that wrote it says so. ``NORMAL`` (WAL's usual setting) syncs only at
checkpoints, and a power cut took every run of the last minutes, ones reported SUCCEEDED among
them. Explicit checkpoints at the points a command reports would cost as much per report and
must be kept right at each of dozens of call sites; one fsync per transaction cost 0.44 ms on
the development machine's disk, a few dozen per run: 0.8% of a 15 s run (docs/benchmarks.md,
"Durability").

The schema is versioned with ``PRAGMA user_version``: migration ``n`` takes version ``n-1`` to
``n``, and is a tuple of single SQL statements run one by one in one transaction. Statements are
never found by splitting text on ``;`` (a ``;`` in a string literal or a comment would cut one in
two). A catalog written by a newer nodus is refused rather than guessed at.

The statement sets of the tables (``runs``, ``attempts``, ``events``, ``requests``) build on
:class:`Connection`; ``core.Catalog`` puts them together.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from nodus._atomic import create_new_private, fsync_dir, private_folder
from nodus.errors import CatalogError
from nodus.schemas import defaults

CATALOG_BUSY_TIMEOUT_S = 30.0
"""How long a catalog write waits for another nodus process before reporting the catalog locked."""

Statement = tuple[str, tuple[Any, ...]]  # SQL and its parameters
Params = tuple[Any, ...] | dict[str, Any]  # a statement's parameters, by position or by name
Migrations = Mapping[int, Sequence[str]]  # version -> the statements that reach it
T = TypeVar("T")


def now() -> str:
    """UTC timestamp with milliseconds, sortable as text."""
    return stamp(datetime.now(UTC))


def stamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stamp_seconds(text: str) -> float:
    """A :func:`stamp` read back, as seconds since the epoch (``time.time()``'s scale)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Connection:
    """One connection to ``$NODUS_HOME/nodus.db``, usable from any thread of one process.

    A store may call the fencing guard from its upload thread, so the connection is shared
    across threads and every statement or transaction holds ``_mutex``.

    Observers are told a run's id after each change of phase, stage or attempt; fences are asked
    before each commit (:mod:`nodus.runner.remote.record` registers both).
    """

    _identity: tuple[int, int] | None  # the catalog file opened (lost())

    def __init__(self, home: str, migrations: Migrations, read_only: bool = False) -> None:
        self.home = home
        if read_only:
            self._open_read_only(migrations)
            return
        try:
            private_folder(home)  # the home, when this makes it: 0700 (docs/security.md)
            # Created 0600 before SQLite opens it: its -wal and -shm files take its mode. Only a
            # new file is touched: closing any descriptor of a database this process has open
            # would drop the POSIX locks SQLite holds on it (another Catalog of this process).
            # A new file's name is made durable in the home: SQLite syncs the folder of its
            # -wal, not the folder of the database.
            if create_new_private(os.path.join(home, defaults.CATALOG_FILE)):
                fsync_dir(home)
        except OSError as error:
            raise CatalogError(f"nodus's home {home} cannot be made: {_os_words(error)}") from None
        self.path = os.path.join(home, defaults.CATALOG_FILE)
        self._mutex = threading.RLock()
        self._observers: list[Callable[[str], None]] = []
        self._fences: list[Callable[[str, str, int], None]] = []
        try:
            self._db = sqlite3.connect(
                self.path,
                timeout=CATALOG_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            self._db.row_factory = sqlite3.Row
            self._enable_wal()
            self._db.execute("PRAGMA synchronous=FULL")  # what a command reports: the docstring
            self._migrate(migrations)
        except sqlite3.Error as error:
            raise self._explain(error) from None
        self._identity = _identity(self.path)

    def lost(self) -> str | None:
        """What became of the catalog file this connection opened, when it is no longer the
        one at its path (deleted, or replaced by another file): an open connection goes on
        writing into the file it opened, which no other process will read again. None while
        it is still there."""
        identity = _identity(self.path)
        if identity == self._identity or self._identity is None:
            return None
        what = "deleted" if identity is None else "replaced by another file"
        return f"the run catalog {self.path} was {what}"

    def _open_read_only(self, migrations: Migrations) -> None:
        """Open the catalog to read only (``nodus ui``): nothing is created, migrated or
        switched to WAL, and SQLite itself refuses every write (``mode=ro``, ``query_only``).

        A WAL reader takes no lock a writer waits on, so a runner is never held up by it.
        """
        self.path = os.path.join(self.home, defaults.CATALOG_FILE)
        self._identity = None  # a reader is never told the file went (lost() says None)
        self._mutex = threading.RLock()
        self._observers = []
        self._fences = []
        if not os.path.isfile(self.path):
            raise CatalogError(f"no run catalog at {self.path} yet: no run was started here")
        try:
            self._db = sqlite3.connect(
                _read_only_uri(self.path),
                uri=True,
                timeout=CATALOG_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA query_only=1")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as error:
            raise self._explain(error) from None
        if version != max(migrations):
            raise CatalogError(
                f"the run catalog {self.path} has schema version {version}, this nodus reads "
                f"{max(migrations)}: "
                + (
                    "upgrade nodus"
                    if version > max(migrations)
                    else "any nodus command that writes (`nodus runs list`) migrates it first"
                )
            )

    def close(self) -> None:
        self._db.close()

    def _enable_wal(self) -> None:
        """Switch a new catalog to WAL, waiting out another process doing the same.

        SQLite does not call its busy handler for a journal-mode change: when two processes
        open a new catalog at once (`nodus run` creating its home while `nodus runs list` looks),
        the second is told "database is locked" at once. It is retried here, up to the same
        busy timeout as any other statement.
        """
        deadline = time.monotonic() + CATALOG_BUSY_TIMEOUT_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _migrate(self, migrations: Migrations) -> None:
        newest = max(migrations)
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > newest:
            raise CatalogError(
                f"the run catalog {self.path} has schema version {version}, newer than this "
                f"nodus understands ({newest}); upgrade nodus"
            )
        for target in range(version + 1, newest + 1):
            statements = migrations[target]
            if isinstance(statements, str):  # iterating it would run it letter by letter
                raise TypeError(f"migration {target} is one text: give a tuple of statements")
            self._immediate(functools.partial(_reach, target=target, statements=statements))

    # --- observers and fences ---------------------------------------------------------------

    def observe(self, observer: Callable[[str], None]) -> Callable[[], None]:
        """Call ``observer(run_id)`` after each phase, stage or attempt change; the remover."""
        self._observers.append(observer)
        return lambda: self._observers.remove(observer)

    def add_fence(self, fence: Callable[[str, str, int], None]) -> Callable[[], None]:
        """``fence(run_id, stage, attempt)`` runs in :meth:`check_fences`; the remover."""
        self._fences.append(fence)
        return lambda: self._fences.remove(fence)

    def check_fences(self, run_id: str, stage: str, attempt: int) -> None:
        """Run every fence; one raises StaleAttemptError when the attempt may not commit."""
        for fence in list(self._fences):
            fence(run_id, stage, attempt)

    def _changed(self, run_id: str) -> None:
        for observer in list(self._observers):
            observer(run_id)

    # --- statements -------------------------------------------------------------------------

    def _execute(self, sql: str, params: Params = ()) -> int | None:
        """One write statement; the new row id for an INSERT."""
        with self._mutex:
            try:
                return self._db.execute(sql, params).lastrowid
            except sqlite3.Error as error:
                raise self._explain(error) from None

    def _rows(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        with self._mutex:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as error:
                raise self._explain(error) from None

    def _one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _transaction(self, statements: list[Statement]) -> None:
        """Run ``statements`` in one transaction: all of them or none."""
        self._immediate(lambda db: [db.execute(sql, params) for sql, params in statements])

    def _immediate(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(db)`` in one write transaction, taken at once: what it reads stays true
        until it commits (the next attempt number, a new row's id)."""
        with self._mutex:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    result = work(self._db)
                except BaseException:
                    self._abandon()
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as error:
                self._abandon()
                raise self._explain(error) from None
            return result

    def _abandon(self) -> None:
        """Roll back a transaction left open by a failure (a later BEGIN would be refused)."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _explain(self, error: sqlite3.Error) -> CatalogError:
        """Turn SQLite's words into what the user can do about it."""
        text = str(error)
        if "locked" in text or "busy" in text:
            return CatalogError(
                f"the run catalog {self.path} is locked by another process and stayed locked "
                f"for {CATALOG_BUSY_TIMEOUT_S:.0f}s ({text}); retry, or find the process "
                f"holding it with `fuser {self.path}`"
            )
        if "full" in text:  # SQLITE_FULL: "database or disk is full"
            return CatalogError(
                f"the run catalog {self.path} cannot be written: the disk is full ({text}); "
                "free space on it and retry (nothing in the catalog was lost)"
            )
        if "readonly" in text or _read_only(self.home):
            return CatalogError(
                f"the run catalog {self.path} cannot be written: {self.home} is read-only "
                f"({text}); give nodus a writable home (--home or NODUS_HOME)"
            )
        if "malformed" in text or "not a database" in text:
            return CatalogError(
                f"the run catalog {self.path} is damaged ({text}); move it aside "
                f"(`mv {self.path} {self.path}.damaged`) and nodus starts a new one; snapshots "
                "in the store are not affected"
            )
        return CatalogError(
            f"the run catalog {self.path} cannot be used ({text}); check that {self.home} is "
            "a folder you can write, on a disk with free space"
        )


def _reach(db: sqlite3.Connection, target: int, statements: Sequence[str]) -> None:
    """Run migration ``target``, one statement at a time, unless another process has already
    (it may have migrated while this one waited for the write lock)."""
    if db.execute("PRAGMA user_version").fetchone()[0] >= target:
        return
    for statement in statements:
        db.execute(statement)  # sqlite3 refuses a text holding two statements
    db.execute(f"PRAGMA user_version = {target}")


def _read_only_uri(path: str) -> str:
    """SQLite's URI of ``path`` opened read-only. The path is percent-quoted: a ``?``, ``#``
    or ``%`` in a home's name would otherwise end the path or be read as an escape."""
    from urllib.parse import quote  # here: a run's own catalog is opened read-write

    return "file://" + quote(os.path.abspath(path)) + "?mode=ro"


def _read_only(folder: str) -> bool:
    """Whether ``folder`` lies on a file system mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _identity(path: str) -> tuple[int, int] | None:
    """The file at ``path`` (device and inode), or None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _os_words(error: OSError) -> str:
    """An OS error in its own words, with what the user would look for next."""
    words = error.strerror or str(error)
    if error.errno == errno.EROFS:
        return f"{words} (the file system is mounted read-only)"
    return words
