"""The Python SDK: building workloads, omission kept in the submission, resolution."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import nodus
from nodus import Continuity, ContinuityMode, Integration, Stage, Workload
from nodus.errors import NodusError, WorkloadError


@pytest.mark.parametrize(
    "given, mode, resume",
    [
        ("restartable", "restartable", False),
        (ContinuityMode.RESTARTABLE, "restartable", False),
        (ContinuityMode.CHECKPOINTED, "checkpointed", True),
        ({"mode": "restartable", "resume_on_interruption": True}, "restartable", True),
        ({"resume_on_interruption": False}, "checkpointed", False),
        ({}, "checkpointed", True),
        (Continuity(mode="restartable"), "restartable", False),
    ],
)
def test_continuity_takes_a_string_a_mode_or_a_dict(given, mode, resume, tmp_path):
    workload = Workload(name="w", command=["python", "t.py"], continuity=given)
    (stage,) = nodus.resolve(workload, base_dir=str(tmp_path)).stages
    assert (stage.continuity.mode, stage.continuity.resume_on_interruption) == (mode, resume)


def test_submission_keeps_omission():
    workload = Workload(name="w", command="python t.py")
    assert workload.submission() == {
        "name": "w",
        "command": ["python", "t.py"],
        "continuity": {"mode": "checkpointed", "resume_on_interruption": True},
    }


def test_submission_sends_checkpoint_complete_only_when_given():
    marked = Workload(name="w", command="python t.py", continuity={"checkpoint_complete": "DONE"})
    assert marked.submission()["continuity"] == {
        "mode": "checkpointed",
        "resume_on_interruption": True,
        "checkpoint_complete": "DONE",
    }
    plain = Workload(name="w", command="python t.py", continuity="checkpointed")
    assert "checkpoint_complete" not in plain.submission()["continuity"]


def test_submission_sends_paths_exactly_as_written_and_integration_only_when_chosen():
    workload = Workload(
        name="w",
        command=("python", "t.py"),
        continuity={"mode": "restartable", "checkpoint_paths": []},
        stages=[
            Stage(name="a"),
            Stage(name="b", integration=Integration.AUTO, continuity={"checkpoint_paths": ["./x"]}),
        ],
    )
    data = workload.submission()
    assert data["continuity"] == {
        "mode": "restartable",
        "resume_on_interruption": False,
        "checkpoint_paths": [],
    }
    assert "integration" not in data
    assert data["stages"] == [
        {"name": "a"},
        {"name": "b", "integration": "auto", "continuity": {"checkpoint_paths": ["./x"]}},
    ]


def test_a_submission_resolves_like_the_file_it_came_from(write):
    path = write(
        'name = "w"\ncommand = "python t.py"\n'
        '[continuity]\nmode = "restartable"\ncheckpoint_paths = ["ckpts"]\n'
        "[execution]\nmax_recoveries = 7\n"
        '[[stages]]\nname = "a"\ncontinuity = { mode = "checkpointed" }\n'
        '[[stages]]\nname = "b"\ncontinuity = { checkpoint_paths = ["own"] }\n'
    )
    workload = nodus.load_workload(path)
    from_file = nodus.resolve(path)
    from_submission = nodus.resolve(workload.submission(), base_dir=str(path.parent))
    assert from_submission.stages == from_file.stages
    assert from_file.source == str(path)


def test_load_workload_keeps_what_was_written(write):
    workload = nodus.load_workload(write('name = "w"\ncommand = "x"\n[execution]\nsave_every = 1'))
    assert workload.execution.model_fields_set == {"save_every"}
    assert workload.continuity is None and workload.integration is None


def test_sdk_refusals_are_workload_errors_with_field_paths():
    with pytest.raises(WorkloadError) as caught:
        Workload(
            name="w",
            command="x",
            stages=[Stage(name="ok"), {"name": "s", "continuity": {"checkpoint_paths": ["/abs"]}}],
        )
    assert caught.value.exit_status == 2
    assert [p.path for p in caught.value.problems] == ["stages[1].continuity.checkpoint_paths[0]"]
    with pytest.raises(NodusError, match="stages: \\[\\] — must not be empty"):
        Workload(name="w", command="x", stages=[])


def test_workloads_are_frozen():
    workload = Workload(name="w", command="x")
    with pytest.raises(ValidationError, match="frozen"):
        workload.name = "v"  # type: ignore[misc]
    assert workload.name == "w"
    assert workload.model_copy(update={"env": {"A": "1"}}).env == {"A": "1"}


def test_overrides_win_over_stage_and_workload(tmp_path):
    workload = Workload(
        name="w",
        command="x",
        integration="auto",  # save_every acts only on an integrated stage
        execution={"save_every": 5, "max_recoveries": 2},
        stages=[Stage(name="s", execution={"max_recoveries": 4}, env={"A": "stage"})],
    )
    resolved = nodus.resolve(
        workload,
        base_dir=str(tmp_path),
        overrides={"name": "branch", "execution": {"max_recoveries": 0}, "env": {"A": "cli"}},
    )
    (stage,) = resolved.stages
    assert resolved.name == "branch"
    assert (stage.execution.save_every, stage.execution.max_recoveries) == (5, 0)
    assert stage.env == {"A": "cli"}


def test_base_dir_defaults_to_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (stage,) = nodus.resolve(Workload(name="w", command="x")).stages
    assert stage.code == str(tmp_path)
