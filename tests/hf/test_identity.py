"""Point 5: a resume that would continue different training is refused, naming what differs.

The run stops at its first interruption (``resume_on_interruption = false``); `nodus runs resume`
then starts the restored attempt from an environment whose dataset or model differs.
"""

from __future__ import annotations

import pytest
from hf_helpers import SAVE_EVERY
from runner_e2e_helpers import Project

pytestmark = [pytest.mark.hf, pytest.mark.slow]


@pytest.mark.parametrize(
    "integration, env, named",
    [
        ("auto", {"QUICKSTART_EXAMPLES": "80"}, "train dataset content differs"),
        (
            "hf-trainer-v1",
            {"QUICKSTART_LAYERS": "3"},
            "model structure (names, shapes, dtypes) differs",
        ),
    ],
    ids=["dataset-under-auto", "model-under-v1"],
)
def test_changed_dataset_or_model_fails_the_attempt_naming_it(tmp_path, integration, env, named):
    project = Project(
        tmp_path,
        integration=integration,
        save_every=SAVE_EVERY,
        write_delay="0.5",
        resume_on_interruption=False,
    )
    runner = project.start("run", str(project.file), "--key", "i")
    project.kill_after_save("i", 1, 15, runner)
    assert runner.wait(timeout=300) == 3  # INTERRUPTED, left for a resume by hand

    resumed = project.nodus("runs", "resume", "i", env=env)  # the program inherits env
    assert resumed.returncode == 1, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    view = project.get("i")
    second = view["stages"][0]["attempts"][1]
    assert (second["restored_step"], second["outcome"]) == (15, "failed")
    assert named in project.log_of(second)
    refused = [e for e in view["events"] if e["type"] == "integration_refused"]
    assert [e["attempt"] for e in refused] == [2]
    assert any(named in reason for reason in refused[0]["reasons"])
    assert project.committed_steps("i", 2) == []  # nothing trained, nothing saved
