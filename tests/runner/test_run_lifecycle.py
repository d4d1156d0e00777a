"""A run's lifecycle as a table: every change of phase it allows is recorded, every other one
is refused and records nothing, on a real catalog (:mod:`nodus.runner.catalog.lifecycle`)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from nodus.errors import NotFoundError, PhaseTransitionError
from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.lifecycle import TRANSITIONS, check
from nodus.runner.catalog.phases import Phase
from run_phases import move_to

Q, PR, RU, RE = Phase.QUEUED, Phase.PREPARING, Phase.RUNNING, Phase.RECOVERING
PG, PD, IN = Phase.PAUSING, Phase.PAUSED, Phase.INTERRUPTED
SU, FA, CA = Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED

# fmt: off
ALLOWED = {  # from → the phases a run may move to (docs/recovery.md, "Phases and exit codes")
    Q:  {PR, RE, SU, IN, FA, CA},
    PR: {Q, PR, RU, RE, IN, FA, CA},
    RU: {Q, PR, RE, PG, PD, SU, IN, FA, CA},
    RE: {Q, PR, RU, RE, IN, FA, CA},
    PG: {Q, PR, RU, RE, PD, SU, IN, FA, CA},
    PD: {Q, PR, FA, CA},
    IN: {Q, PR, FA, CA},
    SU: set(),
    FA: set(),
    CA: set(),
    Phase.PENDING: set(),  # a stage's phase only
}
# fmt: on
PAIRS = {(a, b) for a, tos in ALLOWED.items() for b in tos}
REFUSED = sorted(set(itertools.product(Phase, Phase)) - PAIRS)


def _id(pair: tuple[Phase, Phase]) -> str:
    return f"{pair[0]}->{pair[1]}"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    return Catalog(str(tmp_path_factory.mktemp("home")))


def _run_in(catalog: Catalog, phase: Phase) -> str:
    run_id = catalog.create_run(
        name="w", workload={}, store="memory://", key=None, lock_name="l", stage_names=["main"]
    )
    move_to(catalog, run_id, phase, stage="main")
    return run_id


def _phase_events(catalog: Catalog, run_id: str) -> list:
    return [e["details"]["phase"] for e in catalog.events(run_id, types=("phase",))]


def test_the_lifecycle_holds_exactly_the_table():
    assert PAIRS == TRANSITIONS


@pytest.mark.parametrize("pair", sorted(PAIRS), ids=_id)
def test_an_allowed_change_is_recorded_with_its_exit_status(catalog, pair):
    source, target = pair
    run_id = _run_in(catalog, source)
    catalog.lifecycle.move(run_id, target, message="why", stage="main")
    run = catalog.get_run(run_id)
    assert (run.phase, run.exit_status, run.message) == (target, target.exit_status, "why")
    assert (run.finished_at is not None) == target.stopped
    assert run.stages[0]["phase"] == target
    assert _phase_events(catalog, run_id)[-1] == target


@pytest.mark.parametrize("pair", REFUSED, ids=_id)
def test_any_other_change_is_refused_and_records_nothing(catalog, pair):
    source, target = pair
    with pytest.raises(PhaseTransitionError, match=f"from {source} to {target}"):
        check("run_x", source, target)
    if source == Phase.PENDING:
        return  # no run is ever PENDING: the table alone refuses it
    run_id = _run_in(catalog, source)
    before = catalog.get_run(run_id), _phase_events(catalog, run_id)
    with pytest.raises(PhaseTransitionError, match=f"run {run_id}: .*a bug in nodus"):
        catalog.lifecycle.move(run_id, target, stage="main")
    assert (catalog.get_run(run_id), _phase_events(catalog, run_id)) == before


def test_a_run_the_catalog_does_not_hold_is_named(catalog):
    with pytest.raises(NotFoundError, match="no run with id 'run_nope'"):
        catalog.lifecycle.move("run_nope", Phase.PREPARING)


def test_only_the_lifecycle_writes_a_run_phase():
    """No module moves a run but through ``catalog.lifecycle``: the raw write is the catalog's
    own, called by the lifecycle alone, and no other statement sets a run's phase."""
    import nodus

    src = Path(nodus.__file__).parent
    writers = {
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if "_write_phase(" in (text := path.read_text()) or "UPDATE runs SET phase" in text
    }
    assert writers == {"runner/catalog/runs.py", "runner/catalog/lifecycle.py"}
