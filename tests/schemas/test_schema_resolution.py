"""Accepted workload files and the values they resolve to (docs/workload-file.md)."""

from __future__ import annotations

import pytest

from nodus.schemas import defaults
from nodus.schemas.loader import resolve_file

BASE = 'name = "w"\ncommand = ["python", "train.py"]\n'


def _continuity(resolved, text: str, stage: int = 0) -> tuple:
    c = resolved(text).stages[stage].continuity
    return c.mode, c.resume_on_interruption, c.checkpoint_paths


@pytest.mark.parametrize(
    "extra, expected",
    [
        # omitted continuity → checkpointed + resume, paths ["state"] at resolution
        ("", ("checkpointed", True, ("state",))),
        ('continuity = "checkpointed"', ("checkpointed", True, ("state",))),
        ('continuity = "restartable"', ("restartable", False, ("state",))),
        ("[continuity]\nresume_on_interruption = false", ("checkpointed", False, ("state",))),
        ('[continuity]\nmode = "restartable"', ("restartable", False, ("state",))),
        (
            '[continuity]\nmode = "restartable"\nresume_on_interruption = true',
            ("restartable", True, ("state",)),
        ),
        ("[continuity]\ncheckpoint_paths = []", ("checkpointed", True, ("state",))),
        (
            '[continuity]\ncheckpoint_paths = ["ckpts", "progress.json"]',
            ("checkpointed", True, ("ckpts", "progress.json")),
        ),
        ('[continuity]\ncheckpoint_paths = ["."]', ("checkpointed", True, (".",))),
        ('[continuity]\ncheckpoint_paths = ["./state/"]', ("checkpointed", True, ("state",))),
    ],
)
def test_workload_continuity(resolved, extra, expected):
    assert _continuity(resolved, BASE + extra) == expected


STAGED = BASE + '[continuity]\ncheckpoint_paths = ["ckpts"]\n[[stages]]\nname = "s"\n'


@pytest.mark.parametrize(
    "stage, expected",
    [
        ("", ("checkpointed", True, ("ckpts",))),
        # a stage inherits the workload's paths even when it sets its own mode
        ('continuity = "restartable"', ("restartable", False, ("ckpts",))),
        ("continuity = { checkpoint_paths = [] }", ("checkpointed", True, ("ckpts",))),
        ('continuity = { checkpoint_paths = ["own"] }', ("checkpointed", True, ("own",))),
        ("continuity = { resume_on_interruption = false }", ("checkpointed", False, ("ckpts",))),
    ],
)
def test_stage_continuity_inherits(resolved, stage, expected):
    assert _continuity(resolved, STAGED + stage) == expected


@pytest.mark.parametrize(
    "top, stage, expected",
    [
        ("", "", None),
        ('checkpoint_complete = "DONE"', "", "DONE"),  # inherited by the stage
        ('checkpoint_complete = "DONE"', 'continuity = "restartable"', "DONE"),  # even so
        ('checkpoint_complete = "DONE"', 'continuity = { checkpoint_complete = "OK" }', "OK"),
        ("", 'continuity = { checkpoint_complete = "COMPLETE.json" }', "COMPLETE.json"),
    ],
)
def test_checkpoint_complete_is_inherited_key_by_key(resolved, top, stage, expected):
    text = BASE + f'[continuity]\n{top}\n[[stages]]\nname = "s"\n{stage}\n'
    (resolved_stage,) = resolved(text).stages
    assert resolved_stage.continuity.checkpoint_complete == expected


@pytest.mark.parametrize(
    "top, stage, expected",
    [
        ("", "", None),
        ('step_key = "iter_num"', "", "iter_num"),
        ('step_key = "iter_num"', 'continuity = { step_key = "n_updates" }', "n_updates"),
    ],
)
def test_step_key_is_inherited_key_by_key_and_kept_under_auto(resolved, top, stage, expected):
    text = BASE + f'integration = "auto"\n[continuity]\n{top}\n[[stages]]\nname = "s"\n{stage}\n'
    (resolved_stage,) = resolved(text).stages
    assert resolved_stage.continuity.step_key == expected


def test_checkpoint_complete_is_kept_under_auto_which_may_leave_a_program_unprepared(resolved):
    text = BASE + 'integration = "auto"\n[continuity]\ncheckpoint_complete = "DONE"'
    assert resolved(text).stages[0].continuity.checkpoint_complete == "DONE"


def test_stage_mode_without_flag_takes_that_modes_default(resolved):
    text = BASE + (
        '[continuity]\nmode = "restartable"\nresume_on_interruption = true\n'
        '[[stages]]\nname = "a"\n'
        '[[stages]]\nname = "b"\ncontinuity = "checkpointed"\n'
        '[[stages]]\nname = "c"\ncontinuity = { checkpoint_paths = ["x"] }\n'
    )
    stages = resolved(text).stages
    assert [(s.continuity.mode, s.continuity.resume_on_interruption) for s in stages] == [
        ("restartable", True),  # inherited as written
        ("checkpointed", True),  # own mode, that mode's default flag
        ("restartable", True),  # only paths given: the policy is inherited
    ]


def test_omitted_stages_make_one_main_stage_from_top_level(resolved, tmp_path):
    workload = resolved(BASE + 'env = { A = "1" }\noutputs = ["out/model"]')
    assert workload.name == "w"
    (stage,) = workload.stages
    assert stage.name == defaults.STAGE_NAME
    assert stage.command == ("python", "train.py")
    assert stage.code == str(tmp_path)
    assert stage.env == {"A": "1"}
    assert stage.outputs == ("out/model",)
    assert stage.integration is None


def test_execution_defaults_and_key_by_key_inheritance(resolved):
    text = BASE + (
        'integration = "auto"\n'  # save_every acts only on an integrated stage
        "[execution]\nsave_every = 10\ngrace_period = 5\n"
        '[[stages]]\nname = "a"\n'
        '[[stages]]\nname = "b"\nexecution = { max_recoveries = 0 }\n'
    )
    a, b = (stage.execution for stage in resolved(text).stages)
    assert (a.save_every, a.max_recoveries, a.grace_period) == (10, defaults.MAX_RECOVERIES, 5.0)
    assert (b.save_every, b.max_recoveries, b.grace_period) == (10, 0, 5.0)
    assert isinstance(b.grace_period, float)
    assert b.keep_recoverable == defaults.KEEP_RECOVERABLE
    assert b.keep_adapters == defaults.KEEP_ADAPTERS
    assert b.retention_days == defaults.RETENTION_DAYS
    assert b.max_source_bytes == defaults.MAX_SOURCE_BYTES
    assert b.save_each_epoch is defaults.SAVE_EACH_EPOCH


@pytest.mark.parametrize(
    "top, stage, expected",
    [
        ("", "", None),
        ('integration = "auto"', "", "auto"),  # inherited explicit selection
        ('integration = "auto"', 'integration = "hf-trainer-v1"', "hf-trainer-v1"),
        ('integration = "auto"', 'integration = "none"', None),  # opt-out
        ("", 'integration = "hf-trainer-v1"', "hf-trainer-v1"),
        ('integration = "auto"\ncontinuity = { checkpoint_paths = ["."] }', "", "auto"),
    ],
)
def test_integration_selection(resolved, top, stage, expected):
    text = f'name = "w"\ncommand = "python t.py"\n{top}\n[[stages]]\nname = "s"\n{stage}\n'
    assert resolved(text).stages[0].integration == expected


def test_stage_overrides_and_env_merges(resolved, tmp_path):
    (tmp_path / "sub").mkdir()
    text = BASE + (
        'env = { A = "top", B = "top" }\noutputs = ["a"]\n'
        '[[stages]]\nname = "prep"\ncommand = "python prep.py --n \'two words\'"\n'
        'code = "sub"\nenv = { B = "stage" }\noutputs = ["b"]\n'
        '[[stages]]\nname = "train"\n'
    )
    prep, train = resolved(text).stages
    assert prep.command == ("python", "prep.py", "--n", "two words")
    assert prep.code == str(tmp_path / "sub")
    assert prep.env == {"A": "top", "B": "stage"}
    assert prep.outputs == ("b",)
    assert train.command == ("python", "train.py")
    assert train.code == str(tmp_path)
    assert train.outputs == ("a",)


@pytest.mark.parametrize("value", ["run_abc@40", "run_abc/train@0", "ckpt_0123abcd"])
def test_resume_from_resolves_as_written(write, value):
    # The file alone cannot tell whether the source exists: `nodus run` checks it at submit.
    assert resolve_file(write(BASE + f'resume_from = "{value}"')).resume_from == value


def test_resolved_round_trips_through_its_dict(resolved):
    workload = resolved(BASE + 'integration = "auto"\n[execution]\nsave_every = 3')
    data = workload.to_dict()
    assert data["stages"][0]["execution"]["grace_period"] == defaults.GRACE_PERIOD_S
    assert data["stages"][0]["execution"]["retention_days"] == defaults.RETENTION_DAYS
    assert type(workload).from_dict(data) == workload
    marked = resolved(BASE + '[continuity]\ncheckpoint_complete = "DONE"')
    assert type(marked).from_dict(marked.to_dict()) == marked
    auto = resolved(BASE + 'integration = "auto"\n[execution]\nsave_every = "auto"')
    assert type(auto).from_dict(auto.to_dict()) == auto


def test_a_resolution_stored_before_max_save_overhead_existed_reads_the_default(resolved):
    data = resolved(BASE).to_dict()
    del data["stages"][0]["execution"]["max_save_overhead"]
    stage = type(resolved(BASE)).from_dict(data).stages[0]
    assert stage.execution.max_save_overhead == defaults.MAX_SAVE_OVERHEAD


def test_a_resolution_stored_before_checkpoint_complete_existed_reads_as_none(resolved):
    data = resolved(BASE).to_dict()
    del data["stages"][0]["continuity"]["checkpoint_complete"]
    stage = type(resolved(BASE)).from_dict(data).stages[0]
    assert stage.continuity.checkpoint_complete is None
