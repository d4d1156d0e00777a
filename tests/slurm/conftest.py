"""The Slurm cluster the tests of this folder share (:mod:`slurm_cluster`): the one ``.ci/run``
started, else one started here for the session's worker that runs them (their xdist group)."""

from __future__ import annotations

import pytest
from slurm_cluster import SlurmCluster, unavailable


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(why)
    started = SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    yield started
    started.stop()
