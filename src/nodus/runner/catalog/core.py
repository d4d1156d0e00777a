"""The run catalog: runs, stages, attempts, events and control requests in one SQLite file.

:class:`Catalog` is one connection (:mod:`.connection`: WAL, busy timeout, transactions, the
migration runner, what a locked or damaged file means) with the statement set of each table
group: :mod:`.runs`, :mod:`.attempts` (stages and attempts), :mod:`.events`, :mod:`.requests`
(control requests and pauses), and the model registry's tables (``nodus.registry.table``).

``_MIGRATIONS[n]`` takes schema version ``n-1`` to ``n``: the statements it runs, one by one. A
migration, once released, never changes: catalogs on disk were made by it.
"""

from __future__ import annotations

from nodus.registry.table import SCHEMA as MODEL_REGISTRY_SCHEMA
from nodus.registry.table import ModelTable
from nodus.runner.catalog import attempts, events, requests, runs
from nodus.runner.catalog.connection import Migrations, now
from nodus.runner.catalog.events import EventStatements
from nodus.runner.catalog.requests import RequestStatements
from nodus.runner.catalog.runs import Run, RunStatements

__all__ = ["SCHEMA_VERSION", "Catalog", "Run", "now"]

_MIGRATIONS: Migrations = {
    1: (
        runs.CREATE_RUNS,
        attempts.CREATE_STAGES,
        attempts.CREATE_ATTEMPTS,
        events.CREATE_EVENTS,
        events.INDEX_EVENTS,
        requests.CREATE_CONTROLS,
    ),
    2: (attempts.ADD_DEVICES, requests.CREATE_PAUSES, requests.INDEX_PAUSES),
    3: (runs.ADD_LAUNCH,),
    4: (runs.ADD_PARENT,),
    5: MODEL_REGISTRY_SCHEMA,  # the model registry's names, versions and aliases
    6: attempts.RENAME_LOST,  # the attempt outcome "interrupted" is "lost"
    7: (attempts.ADD_JOB,),  # the Slurm job an attempt ran as
}
SCHEMA_VERSION = max(_MIGRATIONS)


class Catalog(RunStatements, RequestStatements, EventStatements):
    """One connection to ``$NODUS_HOME/nodus.db``, usable from any thread of one process, with
    the statements of every table (stages and attempts come with the runs').

    A runner driving a run against a shared store mirrors the run into it
    (:mod:`nodus.runner.remote.record`): it registers an observer, told the run's id after each
    change of phase, stage or attempt, and a fence, asked before each commit.
    """

    def __init__(self, home: str, read_only: bool = False) -> None:
        super().__init__(home, _MIGRATIONS, read_only)

    @property
    def models(self) -> ModelTable:
        """The model registry's tables, over this catalog's connection (``nodus.registry``)."""
        return ModelTable(self._rows, self._transaction)
