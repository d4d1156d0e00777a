"""Point 5: a resume that would continue different training is refused, naming what differs."""

from __future__ import annotations

import pytest
from hf_helpers import resume

pytestmark = pytest.mark.hf


@pytest.mark.parametrize(
    "integration, env, named",
    [
        ("auto", {"QUICKSTART_EXAMPLES": "80"}, "dataset fingerprint differs"),
        (
            "hf-trainer-v1",
            {"QUICKSTART_LAYERS": "3"},
            "model structure (names, shapes, dtypes) differs",
        ),
    ],
    ids=["dataset-under-auto", "model-under-v1"],
)
def test_changed_dataset_or_model_fails_the_attempt_naming_it(
    prepared_run, workdir, integration, env, named
):
    run = resume(prepared_run, 15, workdir, f"changed-{integration}", integration, env=env)
    assert run.finish() != 0
    assert named in run.log()
    refused = [e for e in run.events() if e["type"] == "integration_refused"]
    assert len(refused) == 1 and any(named in r for r in refused[0]["details"]["reasons"])
    assert run.recorded_steps() == []  # nothing trained, nothing saved
