"""Fixtures for the hf-trainer-v1 tests: the quick-start program, bare and under the real runner.

Every run under nodus is a real `nodus` process (see ``runner_e2e_helpers.Project``): the runner
writes the integration's settings, asks for saves, captures and commits, and recovers. Runs that
several tests compare against are made once per session: bare runs once for all xdist workers,
and the tests of the ``prepared`` run share one worker (``xdist_group``).
"""

from __future__ import annotations

import hf_helpers
import pytest
from hf_helpers import PREPARED, SAVE_EVERY, bare_run_hash
from runner_e2e_helpers import Project


@pytest.fixture(scope="session", autouse=True)
def _shared_results(tmp_path_factory):
    """Results of bare runs (``hf_helpers.once_per_session``) kept for the session."""
    hf_helpers.SHARED_RESULTS = hf_helpers.shared_results_folder(tmp_path_factory)
    yield
    hf_helpers.SHARED_RESULTS = None


@pytest.fixture(scope="session")
def bare_hash(tmp_path_factory) -> str:
    """Final weights of an uninterrupted bare `python train.py` (no nodus at all)."""
    return bare_run_hash(tmp_path_factory.mktemp("bare"))


@pytest.fixture(scope="session")
def prepared(tmp_path_factory) -> Project:
    """One uninterrupted run (key ``prepared``) under explicit hf-trainer-v1, saving every 5.

    Retention keeps every save whole: the tests download and resume early ones.
    """
    project = Project(
        tmp_path_factory.mktemp("prepared"),
        save_every=SAVE_EVERY,
        write_delay="0",
        keep_recoverable=100,
    )
    proc = project.nodus("run", str(project.file), "--key", PREPARED, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return project
