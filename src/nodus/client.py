"""``nodus.Client``: runs and snapshots from Python, with the command line's answers.

    import nodus

    client = nodus.Client()                            # $NODUS_HOME, its default store
    run = client.run("workload.toml", key="nightly")   # drives it here, returns when it stops
    best = client.snapshots(run["id"], sort="loss")[0]
    client.download(best["id"], to="best-model")

Every method returns what the matching command prints with ``--json`` (docs/cli.md), built by
the same functions, and reports a problem by raising a :mod:`nodus.errors` exception (never
``SystemExit``): ``error.exit_status`` is what the command line would exit with. The command line
is a thin layer over this class: it parses arguments, prints these dicts and picks exit statuses.

Importing this module is cheap: the runner, the store and pydantic load on first use, so
``import nodus`` stays quick for cron and shell completion.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from nodus import protocol
from nodus._logging import Logger
from nodus.errors import UsageError
from nodus.schemas import defaults

if TYPE_CHECKING:
    import argparse

    from nodus.inventory import Lookup
    from nodus.runner.catalog.core import Catalog, Run
    from nodus.runner.submit.claim import Claim
    from nodus.schemas.models import Workload
    from nodus.schemas.resolved import ResolvedWorkload

__all__ = ["Client"]


# The SDK's narration where its caller names no ``say`` (the command line names its own).
_NARRATION = Logger("nodus")


class Client:
    """The runs and snapshots of one nodus home.

    ``home`` is the folder of the run catalog and the default store (default ``$NODUS_HOME``,
    else ``~/.nodus``). ``store`` is a snapshot store URL, as ``--store``: new runs use it
    (default ``$NODUS_STORE``, else ``file://<home>/store``), and when given, snapshots are read
    from it instead of the store a run recorded. A run given to a method is its id (``run_…``)
    or its key; a snapshot is ``ID``, ``RUN@STEP`` or ``RUN/STAGE@STEP``.

    ``output`` is where a run driven in this process streams its program's output (default
    ``sys.stdout``); ``say`` receives nodus's notes on what it is doing ("accepted run_…", and
    while :meth:`run`, :meth:`resume`, :meth:`branch` or :meth:`wait` blocks, each interruption
    and recovery as it happens; each committed snapshot too with ``say_snapshots``), by default
    the ``nodus`` logger at INFO.

    ``read_only`` opens the catalog to read only (``nodus ui``): SQLite refuses every write,
    nothing is created or migrated, and stores are opened once and kept, so a client that
    answers a page every few seconds costs a runner nothing. Methods that change a run fail.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        store: str | None = None,
        *,
        output: IO[str] | None = None,
        say: Callable[[str], None] | None = None,
        say_snapshots: bool = False,
        read_only: bool = False,
    ) -> None:
        self.home = defaults.nodus_home(os.fspath(home) if home is not None else None)
        self.store = store
        self.read_only = read_only
        self._output = output
        self._say = say or _NARRATION.info
        self._say_snapshots = say_snapshots
        self._open_catalog: Catalog | None = None
        self._open_lookup: Lookup | None = None
        self._summaries: dict[tuple[str, str], Any] = {}  # stopped runs' curves (run_metrics)

    def close(self) -> None:
        """Close the catalog connection (the client opens it again when used)."""
        if self._open_catalog is not None:
            self._open_catalog.close()
            self._open_catalog = None
        if self._open_lookup is not None:
            self._open_lookup.catalog.close()
            self._open_lookup = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(home={self.home!r}, store={self.store!r})"

    # --- running ------------------------------------------------------------------------------

    def run(
        self,
        workload: str | os.PathLike[str] | Workload | ResolvedWorkload | Mapping[str, Any],
        key: str | None = None,
        detach: bool = False,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        resume_from: str | None = None,
        backend: str | None = None,
        backend_options: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Accept a workload as a run and drive it, like ``nodus run``; the run dict.

        ``workload`` is a workload file, a :class:`nodus.Workload` (or a submission dict) or
        what :func:`nodus.resolve` returned. Its ``code`` folders are relative to ``base_dir``:
        by default the file's folder, or the current directory for a workload built in Python.
        The run's source is captured from there now; the run never reads those files again.

        Without ``detach`` the run is driven in this process (from the main thread: SIGTERM and
        SIGINT are taken as a preemption notice meanwhile) and the run is returned once it
        stopped. With ``detach`` a background runner drives it and the run is returned as it
        was handed over (QUEUED until that runner starts); :meth:`wait` follows it. ``key``
        makes the call idempotent: the key's run is continued, or returned without running
        again once it has finished. ``resume_from`` (``RUN@STEP`` or a snapshot id, like
        ``--resume-from``) starts the run from that finished run's training state
        (docs/lineage.md);
        it wins over the workload's own ``resume_from``. ``backend`` (a name of the backend
        registry, :mod:`nodus.schemas.backends`: ``"local"``, ``"ray"``) replaces every stage's
        ``[execution] backend`` and is stored with the run; ``backend_options`` are the drive
        options the backends take, by flag (``{"--ray-address": "HOST:PORT"}``).
        """
        _check_foreground(detach, "run")
        from nodus.runner.backends import Placement
        from nodus.runner.submit.claim import claim_workload

        resolved = _resolve(workload, base_dir, resume_from, backend, home=self.home)
        store_url = defaults.store_url(self.store, self.home)
        claim = claim_workload(
            self.home,
            store_url,
            resolved,
            key=key,
            say=self._say,
            detach=detach,
            placement=Placement.given(None, backend_options or {}),
        )
        return self._carry_out(claim, detach)

    def branch(
        self,
        snapshot: str,
        mode: str = protocol.FULL_STATE,
        *,
        name: str | None = None,
        set: Mapping[str, Any] | Sequence[str] | None = None,  # the flag's name
        key: str | None = None,
        detach: bool = False,
    ) -> dict[str, Any]:
        """A new run from a finished run's snapshot, like ``nodus runs branch``; the run dict.

        ``mode`` is ``"full-state"`` (continue from the snapshot's training state, as
        ``resume_from``) or ``"weights"`` (a warm start: its weights, fresh optimizer state,
        step 0). The run takes the parent's stored resolution and source; ``set`` changes
        ``name``, ``outputs``, ``env`` or ``[execution]`` keys, as ``{"env.MAX_STEPS": 40}``
        or ``["env.MAX_STEPS=40"]``. Blocks like :meth:`run` unless ``detach``.
        """
        from nodus.runner.submit.claim import claim_branch

        _check_foreground(detach, "branch")
        claim = claim_branch(
            self.home,
            snapshot,
            mode=mode,
            changes=_changes(set, name),
            key=key,
            say=self._say,
            detach=detach,
            store_url=self.store,
        )
        return self._carry_out(claim, detach)

    def resume(
        self,
        run: str,
        step: int | None = None,
        detach: bool = False,
        *,
        backend: str | None = None,
        backend_options: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Continue an interrupted, paused or runner-less run, like ``nodus runs resume``.

        ``step`` restores the snapshot of that step (a PAUSED run only); otherwise the newest
        one holding training state. Blocks like :meth:`run`. A run this home's catalog does
        not know is adopted from its record in the client's store (recovery on a new machine).
        ``backend`` runs this resume's attempts there instead of the stages' own backend (a
        multi-node stage keeps its node count); ``backend_options`` as for :meth:`run`.
        """
        from nodus.runner.backends import Placement
        from nodus.runner.submit.claim import claim_resume

        _check_foreground(detach, "resume")
        store_url = defaults.store_url(self.store, self.home)
        claim = claim_resume(
            self.home,
            run,
            step=step,
            say=self._say,
            detach=detach,
            store_url=store_url,
            placement=Placement.given(backend, backend_options or {}),
        )
        return self._carry_out(claim, detach, history=False)

    def _carry_out(self, claim: Claim, detach: bool, history: bool = True) -> dict[str, Any]:
        if claim.finished:
            return self.get(claim.run_id)
        if detach:
            handed_over = self.get(claim.run_id)
            claim.detach(self._background_entry())
            self._say(
                f"{claim.run_id} runs in the background; `nodus runs wait {claim.run_id}` "
                "waits for it"
            )
            return handed_over
        from nodus.inventory.runs import capture_failure_line, phase_line

        with self._narrated(claim.run_id, history):  # a resume's past is not news
            claim.drive(self._output or sys.stdout)
        data = self.get(claim.run_id)
        self._say(phase_line(data))
        failed = capture_failure_line(data["capture_failures"])
        if failed:  # never end silently green when snapshots were lost on the way
            self._say(failed)
        return data

    def _background_entry(self) -> list[str]:
        """The background runner a detached run is handed to: a client of the same home
        driving it with this client's narration (``--quiet``: no snapshot lines), written to
        its ``runner.log``. It is the command line's module (named, never imported here), as
        the process is a command of its own: argument parsing, exit status."""
        quiet = [] if self._say_snapshots else ["--quiet"]
        return [sys.executable, "-m", "nodus.cli.background", *quiet]

    def drive_handed_over(self, handed: argparse.Namespace) -> dict[str, Any]:
        """The background runner's work (``python -m nodus.cli.background``): take the run
        ``handed`` names (the arguments of :mod:`nodus.runner.submit.detach`) and drive it as
        :meth:`run` does, narrated; the run dict. A run no longer QUEUED is left as it is."""
        from nodus.runner.submit.detach import claim_queued

        claim = claim_queued(handed, self._say)
        return self._carry_out(claim, detach=False, history=not handed.resume)

    # --- watching and controlling ---------------------------------------------------------------

    def runs(
        self,
        limit: int = 50,
        *,
        offset: int = 0,
        phase: str | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        """The newest runs first, like ``nodus runs list --json``: ``offset`` skips that many,
        ``phase`` keeps one phase, ``name`` runs whose name, id or key holds that text. Each
        with its duration, step and newest logged loss (:mod:`nodus.inventory.glance`)."""
        from nodus.inventory.glance import glances
        from nodus.inventory.overview import check_filters
        from nodus.inventory.runs import run_summary

        check_filters(offset, phase, limit)
        catalog = self._catalog()
        found = catalog.list_runs(limit=limit, offset=offset, phase=phase, name=name)
        glanced = glances(catalog, found)
        return [{**run_summary(run, catalog.home), **glanced[run.id]} for run in found]

    def runs_page(
        self,
        limit: int = 100,
        *,
        offset: int = 0,
        phase: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """A page of :meth:`runs` (``{total, offset, limit, runs}``), each row with its stages,
        attempts, recoveries, duration, newest snapshot and stored bytes (``nodus ui``)."""
        from nodus.inventory.overview import runs_page

        return runs_page(self._lookup(), limit=limit, offset=offset, phase=phase, name=name)

    def get(self, run: str) -> dict[str, Any]:
        """One run with its stages, attempts, pause and events, like ``nodus runs get --json``."""
        from nodus.inventory.runs import run_json
        from nodus.runner.upkeep.gc import run_usage

        catalog = self._catalog()
        found = catalog.get_run(run)
        data = run_json(catalog, found)
        data["stored"] = run_usage(self._store(self.store or found.store), found.id)
        return data

    def workload(self, run: str) -> dict[str, Any]:
        """The workload nodus resolved when it accepted the run (every default explicit), as
        it was stored with the run; a password in a store URL is never shown."""
        from nodus.errors import redacted_values

        return dict(redacted_values(self._catalog().get_run(run).workload))

    def usage(self, run: str) -> list[dict[str, Any]]:
        """What each running attempt of the run uses now, read on this machine: its stage,
        attempt number, CPU, memory and GPUs (``nodus ui``); empty once nothing runs here."""
        from nodus.inventory.resources import attempt_use

        found = self._catalog().get_run(run)
        used = []
        for stage in found.stages:
            for attempt in stage["attempts"]:
                use = attempt_use(attempt)
                if use is not None:
                    used.append({"stage": stage["name"], "attempt": attempt["number"], **use})
        return used

    def output(self, run: str, stage: str, attempt: int, offset: int = 0) -> dict[str, Any]:
        """One attempt's program output from byte ``offset`` on, in whole lines (``runs logs``
        in pieces): ``{stage, attempt, offset, next_offset, lines, running}``."""
        from nodus.inventory.output import output_piece

        return output_piece(self._catalog().get_run(run), stage, attempt, offset)

    def output_file(self, run: str, stage: str, attempt: int) -> str | None:
        """The file of one attempt's program output, its bytes as written (``runs logs --raw``,
        the page's raw link); ``None`` before the attempt has one."""
        from nodus.inventory.output import log_file

        return log_file(self._catalog().get_run(run), stage, attempt)

    def metrics(self, run: str) -> list[dict[str, Any]]:
        """What ``nodus runs plot`` draws, as data: per stage its metric curves over steps,
        its snapshots and the step each later attempt restored (a recovery or a resume)."""
        from nodus.inventory.plot import collect, series_json

        lookup = self._lookup()
        found = lookup.run(run)
        return series_json(collect(lookup.store_of_run(found), lookup.catalog, found))

    def run_metrics(self, runs: list[str]) -> dict[str, dict[str, Any]]:
        """Per run id, its headline metric (loss, else reward): newest and best over every
        logged step (``summary``), and each snapshot's metrics and time (``snapshots``), for
        ``nodus ui``'s runs and models lists. A stopped run's curves are read once per client."""
        from nodus.inventory.metric_summary import run_metrics

        catalog = self._catalog()
        found = [catalog.get_run(run) for run in runs]
        return run_metrics(self._lookup(), found, self._summaries)

    @staticmethod
    def phases() -> list[str]:
        """Every phase a run can be in, in the order a run moves through them."""
        from nodus.runner.catalog.phases import Phase

        return [phase.value for phase in Phase if phase is not Phase.PENDING]

    def lineage(self) -> list[dict[str, Any]]:
        """The runs linked by ``resume_from`` and branches, each under its parent, like
        ``nodus runs list --tree --json``'s rows with their ``depth``."""
        from nodus.inventory.runs import lineage_tree, run_summary

        catalog = self._catalog()
        linked = [run_summary(run, catalog.home) for run in catalog.lineage_runs()]
        return [{**run, "depth": depth} for depth, run in lineage_tree(linked)]

    def progress(self, run: str) -> dict[str, Any] | None:
        """Where a run that goes on stands, like ``runs get --json``'s ``progress``: the step,
        the step training ends at, the last loss, steps per second, the time left, the newest
        committed snapshot and its age; None once the run stopped."""
        from nodus.inventory.runs import progress_json

        catalog = self._catalog()
        found = catalog.get_run(run)
        commits = catalog.events(found.id, types=("snapshot_committed",))  # all it reads of them
        return progress_json(self.home, found, commits)

    def wait(self, run: str, timeout: float | None = None) -> dict[str, Any]:
        """The run once it stopped (waiting through RECOVERING and PAUSING), like ``runs wait``.

        Raises :class:`~nodus.errors.PausedError` when the run's runner is gone (it says how to
        recover it) and :class:`~nodus.errors.WaitTimeoutError` after ``timeout`` seconds.
        """
        from nodus.runner.control import outside as control

        run_id = self._catalog().get_run(run).id
        with self._narrated(run_id, history=True):  # the interruptions it had before, too
            return self._json(control.wait(self.home, self._catalog(), run_id, timeout))

    def _narrated(
        self, run_id: str, history: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        """Interruptions, recoveries (and committed snapshots) said while a call blocks."""
        from nodus.inventory.narration import narrated

        return narrated(
            self.home, run_id, self._say, snapshots=self._say_snapshots, history=history
        )

    def pause(
        self, run: str, checkpoint: str = "save", deadline: str | float | None = None
    ) -> dict[str, Any]:
        """Ask the run's runner to pause it, like ``nodus runs pause``; the pause dict.

        ``checkpoint`` is ``"save"`` (save at the next boundary, then stop) or ``"latest"``
        (stop now; a resume repeats the updates after the newest snapshot). ``deadline`` is a
        duration (``"10m"``) or seconds, default 10 minutes. Returns once the runner took the
        pause up; saving and stopping go on in the background (:meth:`wait` follows it).
        """
        from nodus.inventory.runs import pause_json
        from nodus.runner.control import outside as control

        asked = control.pause(self.home, run, checkpoint, _deadline_seconds(deadline))
        data = pause_json(asked)
        assert data is not None  # a pause was just recorded
        return data

    def cancel(self, run: str) -> dict[str, Any]:
        """Cancel a run, like ``nodus runs cancel``; the run afterwards (phase CANCELLED)."""
        from nodus.runner.backends.base import end_left
        from nodus.runner.control import outside as control

        def ended(found: Run) -> None:  # a dead runner's attempt that runs as a cluster job
            end_left(found.stages)

        return self._json(control.cancel(self.home, self._catalog(), run, self._say, ended))

    # --- snapshots ------------------------------------------------------------------------------

    def snapshots(
        self, run: str, sort: str | None = None, *, stage: str | None = None, reverse: bool = False
    ) -> list[dict[str, Any]]:
        """A run's committed checkpoints, like ``nodus runs snapshots --json``.

        Oldest step first; ``sort`` orders by a logged metric (``"loss"``) or ``step``,
        ``epoch``, ``attempt``, smallest first (``reverse``: largest first).
        """
        from nodus.inventory.listing import list_run

        _, rows = list_run(self._lookup(), run, stage=stage, sort=sort, descending=reverse)
        return rows

    def download(
        self, snapshot: str, to: str | os.PathLike[str], artifact: str = "model"
    ) -> dict[str, Any]:
        """Write a snapshot's ``model``, ``resumable`` state or ``adapter`` into the new or
        empty folder ``to``, every file verified, like ``nodus snapshots download --json``.

        ``model`` of a managed method's LoRA checkpoint is its adapter merged into the run's
        base model (the folder recorded when the run was accepted, refused if it changed)."""
        from nodus.inventory.download import download_snapshot, written_json

        located = self._lookup().locate(snapshot)
        target = os.fspath(to)
        files = download_snapshot(
            located.store, located.manifest, artifact, target, run=located.run
        )
        return written_json(located.manifest.id, artifact, target, files)

    # --- the model registry ---------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        """Every model version, by name then number, like ``nodus models list --json``."""
        from nodus.inventory.models import list_models

        return list_models(self._lookup())

    def model(self, ref: str) -> dict[str, Any]:
        """The version ``NAME`` (the newest), ``NAME:VERSION`` or ``NAME@ALIAS`` names, with
        its files, like ``nodus models get --json``."""
        from nodus.inventory.models import get_model

        return get_model(self._lookup(), ref)

    def alias_model(self, name: str, version: int | str, alias: str) -> dict[str, Any]:
        """Point ``alias`` at ``name``'s ``version`` (moving it), like ``nodus models alias``."""
        from nodus.inventory.models import alias_model

        return alias_model(self._lookup(), name, version, alias)

    def download_model(self, ref: str, to: str | os.PathLike[str]) -> dict[str, Any]:
        """Write a version's weights into the new or empty folder ``to``, every file verified,
        like ``nodus models download --json``."""
        from nodus.inventory.models import download_model

        return download_model(self._lookup(), ref, os.fspath(to))

    def delete_model(self, ref: str) -> dict[str, Any]:
        """Remove the version ``NAME:VERSION`` and its aliases, like ``nodus models delete``."""
        from nodus.inventory.models import delete_model

        return delete_model(self._lookup(), ref)

    def candidate(self, snapshot: str) -> dict[str, Any]:
        """For an epoch save: its version, epoch and step, like ``snapshots candidate --json``."""
        from nodus.inventory.models import candidate

        return candidate(self._lookup(), snapshot)

    def register(self, snapshot: str, model: str | None = None) -> dict[str, Any]:
        """Register a snapshot's weights as a new version of ``model`` (default: its run's
        name), like ``nodus snapshots register --json``."""
        from nodus.inventory.models import register_snapshot

        return register_snapshot(self._lookup(), snapshot, model)

    # --- housekeeping ---------------------------------------------------------------------------

    def gc(self, dry_run: bool = False, *, now: float | None = None) -> dict[str, Any]:
        """Expire finished runs' snapshots, finish interrupted deletions and sweep unreferenced
        blobs in every store the catalog's runs use, like ``nodus gc --json``.

        ``dry_run`` reports what would go and removes nothing. ``now`` (seconds since the
        epoch) is the moment expiry is judged at; default the current time.
        """
        from nodus.runner.upkeep.gc import collect

        store_url = defaults.store_url(self.store, self.home)
        return collect(self._catalog(), store_url, now=now, dry_run=dry_run).to_dict()

    def delete(self, run: str) -> dict[str, Any]:
        """Remove a finished run's snapshots, outputs and catalog rows, like ``runs delete``."""
        from nodus.runner.upkeep.gc import delete_run

        return delete_run(self._catalog(), self.home, run, self._say)

    # --- plumbing -------------------------------------------------------------------------------

    def _catalog(self) -> Catalog:
        from nodus.runner.catalog.core import Catalog

        if self.read_only:
            return self._lookup().catalog  # one read-only connection
        if self._open_catalog is None:
            self._open_catalog = Catalog(self.home)
        return self._open_catalog

    def _lookup(self) -> Lookup:
        from nodus.inventory import Lookup

        if not self.read_only:
            return Lookup(self.home, self.store)
        if self._open_lookup is None:  # kept: its stores keep the manifests they read
            self._open_lookup = Lookup(self.home, self.store, read_only=True)
        return self._open_lookup

    def _store(self, url: str) -> Any:
        from nodus.store import open_store

        return self._lookup().store(url) if self.read_only else open_store(url)

    def _json(self, run: Any) -> dict[str, Any]:
        from nodus.inventory.runs import run_json

        return run_json(self._catalog(), run)


def _resolve(
    workload: Any,
    base_dir: str | os.PathLike[str] | None,
    resume_from: str | None = None,
    backend: str | None = None,
    home: str | None = None,
) -> ResolvedWorkload:
    """The resolved workload; the command line's ``resume_from`` and ``backend`` win over the
    file's (``backend`` over every stage's). A file resolved before under ``home`` is not
    resolved again (:mod:`nodus.schemas.remembered`)."""
    import dataclasses

    from nodus.schemas.resolved import ResolvedWorkload

    if isinstance(workload, ResolvedWorkload):
        if resume_from is not None:
            workload = dataclasses.replace(workload, resume_from=resume_from)
        if backend is None:
            return workload
        stages = tuple(
            dataclasses.replace(s, execution=dataclasses.replace(s.execution, backend=backend))
            for s in workload.stages
        )
        return dataclasses.replace(workload, stages=stages)
    overrides: dict[str, Any] = {}
    if resume_from is not None:
        overrides["resume_from"] = resume_from
    if backend is not None:
        overrides["execution"] = {"backend": backend}
    if home is not None and base_dir is None and isinstance(workload, (str, os.PathLike)):
        from nodus.schemas.remembered import resolve_remembered

        return resolve_remembered(os.fspath(workload), overrides or None, home)
    from nodus.schemas.sdk import resolve  # pydantic

    folder = os.fspath(base_dir) if base_dir is not None else None
    return resolve(workload, base_dir=folder, overrides=overrides or None)


def _changes(changes: Mapping[str, Any] | Sequence[str] | None, name: str | None) -> dict:
    """A branch's changes as one table: ``KEY=VALUE`` texts, or a mapping of dotted keys."""
    from nodus.schemas.continuation import parse_setting, settings_table

    if isinstance(changes, Mapping):
        items = list(changes.items())
    else:
        items = [parse_setting(text) for text in changes or ()]
    if name is not None:
        items.append(("name", name))
    return settings_table(items)


def _check_foreground(detach: bool, method: str) -> None:
    """Signal handlers can only be installed from the main thread."""
    if not detach and threading.current_thread() is not threading.main_thread():
        raise UsageError(
            f"Client.{method}() drives the run in this process, which needs the main thread "
            "(SIGTERM and SIGINT become a preemption notice); call it there, or pass detach=True"
        )


def _deadline_seconds(deadline: str | float | None) -> float:
    from nodus.runner.control.pause_request import parse_duration

    if deadline is None:
        return defaults.PAUSE_DEADLINE_S
    if isinstance(deadline, str):
        return parse_duration(deadline)
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or deadline <= 0:
        raise UsageError(
            f"deadline {deadline!r}: give a positive number of seconds or 30s, 10m, 1h"
        )
    return float(deadline)
