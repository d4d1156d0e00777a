"""The Ray backend's cases (:mod:`cluster_cases`), run inside a network namespace of their own.

Ray registers a node on the machine's other interface address even when told 127.0.0.1
(ray-project/ray #59110, #26293); in a namespace whose only interface is loopback it cannot, so
the cluster, its S3 server and the runners under test stay on loopback. ``unshare --net --pid``
gives that namespace (tests and CI run as root), and ending its first process ends every
process of the cluster. The cases run once per module, in one pytest inside the namespace, and
each case here reports its own result. All of it is one xdist group: never two clusters at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.slow]

HERE = Path(__file__).parent
CASES = [
    "test_directory_contract_workload_runs_on_a_node",
    "test_node_local_store_is_refused_at_submit",
    "test_a_lost_node_is_an_interruption",
    "test_two_node_stage_captures_rank_0_and_recovers_both",
    "test_pause_at_a_save_reaches_the_node_and_resume_continues_on_the_cluster",
    "test_cancel_reaches_the_node_and_leaves_no_process_of_the_attempt",
    "test_a_preemption_notice_reaches_the_node_program_which_saves",
    "test_a_secret_is_read_from_the_nodes_environment_and_stored_nowhere",
]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, str | None]:
    """Each case's failure text, or None when it passed."""
    report = tmp_path_factory.mktemp("ray") / "cases.xml"
    inner = (
        f"{sys.executable} -m pytest -q -p no:xdist -p no:cacheprovider "
        f"{HERE / 'cluster_cases.py'} --junitxml={report}"
    )
    proc = subprocess.run(
        [
            "unshare",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            f"ip link set lo up && exec {inner}",
        ],
        cwd=HERE.parents[1],
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.exists(), f"the cases did not run ({proc.returncode}):\n{proc.stderr[-3000:]}"
    found: dict[str, str | None] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        problem = next(iter(case), None)
        failed = problem is not None and problem.tag in ("failure", "error", "skipped")
        found[case.get("name")] = (problem.text or problem.get("message")) if failed else None
    return found


@pytest.mark.parametrize("case", CASES)
def test_case(results, case):
    assert case in results, f"{case} did not run: {sorted(results)}"
    assert results[case] is None, results[case]
