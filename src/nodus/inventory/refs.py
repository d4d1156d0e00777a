"""Naming a snapshot on the command line: ``ID``, ``RUN@STEP`` or ``RUN/STAGE@STEP``.

``RUN`` is a run id or its ``--key``. A step names a checkpoint snapshot of that run; when
several attempts saved the same step the latest attempt's is meant (the one a resume would
restore), and when several stages reached it the reference must name the stage.

A run's snapshots live in the store recorded when the run was accepted, so a ``RUN@STEP``
reference is looked up there. A bare id is looked up in ``--store`` (or the default store),
then in the stores the catalog's runs recorded, so ``nodus snapshots get ckpt_…`` works for a
run that used an S3 store without repeating its URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nodus.errors import NotFoundError, StoreUnreachableError, UsageError
from nodus.schemas import defaults
from nodus.schemas.snapshot_ref import SnapshotRef, parse_ref

if TYPE_CHECKING:
    from nodus.store import Manifest, SnapshotStore

__all__ = ["Located", "Lookup", "SnapshotRef", "parse_ref"]

CATALOG_SCAN = 10_000
"""Most runs whose recorded stores a bare id is searched in (newest first)."""


@dataclass
class Located:
    """A committed snapshot, the store it lives in, and its run when the catalog knows it."""

    manifest: Manifest
    store: SnapshotStore
    run: Any | None  # nodus.runner.catalog.core.Run


class Lookup:
    """Finds runs and snapshots for one command: one catalog, stores opened once per URL."""

    def __init__(self, home: str | None, store_url: str | None, read_only: bool = False) -> None:
        from nodus.runner.catalog.core import Catalog

        self.home = defaults.nodus_home(home)
        self.explicit_store = store_url
        self.catalog = Catalog(self.home, read_only=read_only)
        self._stores: dict[str, SnapshotStore] = {}

    # --- stores -----------------------------------------------------------------------------

    def store(self, url: str) -> SnapshotStore:
        from nodus.store import open_store

        if url not in self._stores:
            self._stores[url] = open_store(url)
        return self._stores[url]

    def store_of_run(self, run: Any) -> SnapshotStore:
        """``--store`` when given, else the store the run recorded when it was accepted."""
        return self.store(self.explicit_store or run.store)

    def default_store(self) -> SnapshotStore:
        return self.store(defaults.store_url(self.explicit_store, self.home))

    # --- runs -------------------------------------------------------------------------------

    def run(self, ref: str) -> Any:
        return self.catalog.get_run(ref)

    def run_or_none(self, run_id: str) -> Any | None:
        try:
            return self.catalog.get_run(run_id)
        except NotFoundError:
            return None  # a snapshot of a run this catalog never saw (a shared store)

    # --- snapshots --------------------------------------------------------------------------

    def locate(self, text: str) -> Located:
        """The committed snapshot a reference names; NotFoundError (exit 2) says what is missing."""
        ref = parse_ref(text)
        if ref.snapshot_id is not None:
            return self._by_id(ref.snapshot_id)
        return self._by_step(ref)

    def _by_id(self, snapshot_id: str) -> Located:
        tried, unreachable = [], []
        for url in self._candidate_urls():
            try:
                store = self.store(url)
                manifest = store.get(snapshot_id)
            except NotFoundError:
                tried.append(url)
                continue
            except StoreUnreachableError as error:  # another run's store may be down
                unreachable.append(str(error))
                continue
            return Located(manifest, store, self.run_or_none(manifest.run))
        hint = "".join(
            _unrecorded_hint(self.catalog, run.id, run.store, snapshot=snapshot_id)
            for run in self.catalog.list_runs(limit=CATALOG_SCAN)
        )
        looked = f"looked in {', '.join(tried)}" if tried else "no store could be searched"
        if unreachable:
            looked += f"; {'; '.join(unreachable)}"
        raise NotFoundError(f"snapshot {snapshot_id} not found ({looked}){hint}")

    def _candidate_urls(self) -> list[str]:
        urls = [defaults.store_url(self.explicit_store, self.home)]
        if self.explicit_store is None:
            for run in self.catalog.list_runs(limit=CATALOG_SCAN):
                if run.store not in urls:
                    urls.append(run.store)
        return urls

    def _by_step(self, ref: SnapshotRef) -> Located:
        run, stage = self._run_and_stage(ref.run or "")
        try:
            store = self.store_of_run(run)
            manifests = store.list(run=run.id, stage=stage)
        except StoreUnreachableError as error:  # the user's to fix (network, credentials): exit 2
            raise UsageError(f"{ref.text}: {error}") from None
        found = [m for m in manifests if m.step == ref.step]
        if not found:
            where = f"{run.id}/{stage}" if stage else run.id
            steps = ", ".join(
                str(step) for step in sorted({m.step for m in manifests if m.step is not None})
            )
            raise NotFoundError(
                f"{where} has no committed snapshot at step {ref.step}"
                + f"; committed steps: {steps or 'none'}"
                + _unrecorded_hint(self.catalog, run.id, store.url, step=ref.step)
            )
        stages = sorted({m.stage or "" for m in found})
        if len(stages) > 1:
            names = ", ".join(f"{run.id}/{name}@{ref.step}" for name in stages)
            raise UsageError(f"{ref.text}: several stages saved step {ref.step}; name one: {names}")
        # Oldest first by step then commit time: the last one is the latest attempt's save.
        latest = max(found, key=lambda m: (m.attempt, m.created))
        return Located(latest, store, run)

    def _run_and_stage(self, text: str) -> tuple[Any, str | None]:
        """``RUN`` or ``RUN/STAGE``; a key may itself hold ``/``, so the whole text wins."""
        try:
            return self.catalog.get_run(text), None
        except NotFoundError:
            if "/" not in text:
                raise
        run_ref, _, stage = text.rpartition("/")
        run = self.catalog.get_run(run_ref)
        names = [s["name"] for s in run.stages]
        if stage not in names:
            raise NotFoundError(f"{run.id} has no stage {stage!r} (stages: {', '.join(names)})")
        return run, stage


def _unrecorded_hint(
    catalog: Any, run_id: str, store_url: str, *, step: int | None = None, snapshot: str = ""
) -> str:
    """Why a save the run made is not in its store: it was never uploaded (issue: unrecorded)."""
    from nodus.runner.catalog.unrecorded import unrecorded

    for save in unrecorded(catalog, run_id):
        if save["role"] != "outputs" and (save["step"] == step or save["snapshot"] == snapshot):
            return (
                f": step {save['step']} of {run_id} is an unrecorded save (it never reached "
                f"the store {store_url}), so it cannot be pinned, downloaded, branched or "
                "resumed from"
            )
    return ""
