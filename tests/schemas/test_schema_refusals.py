"""Refused workload files: every problem names its field path, the value and the rule."""

from __future__ import annotations

import pytest

from nodus.errors import WorkloadError
from nodus.schemas.loader import resolve_file

BASE = 'name = "w"\ncommand = ["python", "train.py"]\n'
STAGE = '[[stages]]\nname = "s"\n'


@pytest.mark.parametrize(
    "text, line",
    [
        # names
        ('name = "Tiny"\ncommand = "x"', "name: 'Tiny' — names use lowercase"),
        ('command = "x"', "name: required"),
        (BASE + '[[stages]]\nname = "-a"', "stages[0].name: '-a' — names use lowercase"),
        (BASE + STAGE + STAGE, "stages[1].name: 's' — stage names must be unique"),
        (BASE + "stages = []", "stages: [] — must not be empty"),
        # command
        ('name = "w"', "command: give the program to run"),
        ('name = "w"\ncommand = ""', "command: '' — the command is empty"),
        ('name = "w"\ncommand = []', "command: [] — the command is empty"),
        ('name = "w"\ncommand = "python \'x"', 'command: "python \'x" — cannot be split'),
        ('name = "w"\ncommand = ["python", 3]', "command[1]: 3 — must be a string"),
        ('name = "w"\n' + STAGE, "stages[0].command: every stage needs a command"),
        # continuity
        (BASE + 'continuity = "sometimes"', "continuity: 'sometimes' — must be 'checkpointed'"),
        (BASE + "continuity = 3", "continuity: 3 — must be a table"),
        (BASE + '[continuity]\nmode = "x"', "continuity.mode: 'x' — must be 'checkpointed'"),
        (
            BASE + "[continuity]\nresume_on_interruption = 1",
            "resume_on_interruption: 1 — must be true",
        ),
        (
            BASE + 'continuity = { checkpoint_paths = "state" }',
            "checkpoint_paths: 'state' — must be a list",
        ),
        # removed and unknown keys
        (
            BASE + "interrupt_tolerance = 2",
            "interrupt_tolerance: not an input: interruption behaviour derives from continuity",
        ),
        (BASE + "comand = 1", "comand: unknown key 'comand'; did you mean 'command'?"),
        (
            BASE + "[continuity]\ncheckpoint_path = []",
            "continuity.checkpoint_path: unknown key 'checkpoint_path'; "
            "did you mean 'checkpoint_paths'?",
        ),
        (
            BASE + "[execution]\nsave_evry = 1",
            "execution.save_evry: unknown key 'save_evry'; did you mean 'save_every'?",
        ),
        (
            BASE + STAGE + "inegration = 'auto'",
            "stages[0].inegration: unknown key 'inegration'; did you mean 'integration'?",
        ),
        (
            BASE + STAGE + "[stages.continuity]\nmod = 'x'",
            "stages[0].continuity.mod: unknown key 'mod'; did you mean 'mode'?",
        ),
        (
            BASE + STAGE + 'resume_from = "r@1"',
            "stages[0].resume_from: unknown key here: 'resume_from' belongs at the top level",
        ),
        (BASE + "zzz = 1", "zzz: unknown key 'zzz'; valid keys here: code, command"),
        # execution
        (BASE + "[execution]\nsave_every = -1", "execution.save_every: -1 — must be at least 0"),
        (
            BASE + '[execution]\nsave_every = "50"',
            "execution.save_every: '50' — must be an integer",
        ),
        (BASE + "[execution]\nsave_every = 5.0", "execution.save_every: 5.0 — must be an integer"),
        (
            BASE + "[execution]\nmax_recoveries = true",
            "execution.max_recoveries: True — must be an integer",
        ),
        (
            BASE + "[execution]\ngrace_period = 0",
            "execution.grace_period: 0 — must be greater than 0",
        ),
        (
            BASE + "[execution]\ngrace_period = nan",
            "execution.grace_period: nan — must be a finite number",
        ),
        (
            BASE + "[execution]\nsave_each_epoch = 'yes'",
            "execution.save_each_epoch: 'yes' — must be true or false",
        ),
        # env, outputs, code, resume_from
        # an env table's values are never echoed (docs/security.md); its names are
        (BASE + "env = { A = 1 }", "env.A: must be a string"),
        (BASE + 'env = { "A B" = "x" }', "env: 'A B' is not a valid variable name"),
        (BASE + 'env = { NODUS_STAGE = "x" }', "names starting with NODUS_ are set by nodus"),
        (
            BASE + 'outputs = ["../model"]',
            "outputs[0]: '../model' — paths must stay inside the code folder",
        ),
        (BASE + 'code = "missing"', "code: 'missing' — the code folder does not exist"),
        (BASE + STAGE + 'code = "gone"', "stages[0].code: 'gone' — the code folder does not exist"),
        (BASE + 'resume_from = "run_1"', "resume_from: 'run_1' — name a snapshot as RUN@STEP"),
        (BASE + 'resume_from = "run_1@x"', "resume_from: 'run_1@x' — name a snapshot as RUN@STEP"),
        # integration needs checkpointed continuity and the state folder
        (
            BASE + 'integration = "auto"\ncontinuity = "restartable"',
            "integration: 'auto' — needs checkpointed continuity, "
            "but stage 'main' resolves to 'restartable'",
        ),
        (
            BASE + 'integration = "hf-trainer-v1"\ncontinuity = { checkpoint_paths = ["ckpts"] }',
            "integration: 'hf-trainer-v1' — needs the state folder saved",
        ),
        (
            BASE + 'integration = "auto"\n' + STAGE + 'continuity = "restartable"',
            "integration: 'auto' — needs checkpointed continuity, but stage 's' resolves",
        ),
        (
            BASE + STAGE + 'integration = "auto"\ncontinuity = { mode = "restartable" }',
            "stages[0].integration: 'auto' — needs checkpointed",
        ),
        (
            BASE + 'integration = "sometimes"',
            "integration: 'sometimes' — must be 'auto', 'hf-trainer-v1' or 'none'",
        ),
        # checkpoint_complete: a file directly inside each checkpoint folder, used without
        # an integration that publishes whole folders itself
        (
            BASE + "[continuity]\ncheckpoint_complete = 1",
            "continuity.checkpoint_complete: 1 — must be a string",
        ),
        (
            BASE + 'integration = "hf-trainer-v1"\n[continuity]\ncheckpoint_complete = "DONE"',
            "continuity.checkpoint_complete: 'DONE' — has no effect in stage 'main': integration "
            "'hf-trainer-v1' publishes each checkpoint whole",
        ),
        (
            BASE
            + '[continuity]\ncheckpoint_complete = "DONE"\n'
            + STAGE
            + 'integration = "hf-trainer-v1"',
            "continuity.checkpoint_complete: 'DONE' — has no effect in stage 's'",
        ),
        (
            BASE
            + STAGE
            + 'integration = "hf-trainer-v1"\n'
            + 'continuity = { checkpoint_complete = "DONE" }',
            "stages[0].continuity.checkpoint_complete: 'DONE' — has no effect in stage 's'",
        ),
        # step_key: a checkpoint's top-level key, for programs that save their own
        (
            BASE + '[continuity]\nstep_key = "config/step"',
            "continuity.step_key: 'config/step' — must be the name of a top-level key",
        ),
        (
            BASE + 'integration = "hf-trainer-v1"\n[continuity]\nstep_key = "iter_num"',
            "continuity.step_key: 'iter_num' — has no effect in stage 'main': integration "
            "'hf-trainer-v1' publishes each checkpoint whole",
        ),
        # settings accepted without effect are refused (docs/workload-file.md, "Errors")
        (
            BASE + "[execution]\nsave_every = 10",
            "execution.save_every: 10 — has no effect in stage 'main': only an integration saves",
        ),
        (
            BASE + 'integration = "auto"\n' + STAGE + 'integration = "none"\n'
            "execution = { save_each_epoch = true }",
            "stages[0].execution.save_each_epoch: True — has no effect in stage 's'",
        ),
        (
            BASE + "[execution]\nsave_every = 5\n" + STAGE + STAGE.replace('"s"', '"t"'),
            "execution.save_every: 5 — has no effect in stages 's', 't'",
        ),
        (
            BASE + 'continuity = "restartable"\n[execution]\nmax_recoveries = 3',
            "execution.max_recoveries: 3 — has no effect in stage 'main': "
            "resume_on_interruption is false there",
        ),
        (
            BASE + "[execution]\nmax_source_bytes = 0",
            "max_source_bytes: 0 — must be greater than 0",
        ),
        # save_every = "auto" and its bound
        (
            BASE + '[execution]\nsave_every = "Auto"',
            "execution.save_every: 'Auto' — must be an integer (optimizer steps) or \"auto\"",
        ),
        (
            BASE + '[execution]\nsave_every = "auto"',
            "execution.save_every: 'auto' — has no effect in stage 'main': only an integration",
        ),
        (
            BASE + 'integration = "auto"\n[execution]\nmax_save_overhead = 0.05',
            "execution.max_save_overhead: 0.05 — has no effect in stage 'main': only "
            'save_every = "auto" reads it',
        ),
        (
            BASE + 'integration = "auto"\n[execution]\nsave_every = 5\nmax_save_overhead = 0.1',
            "execution.max_save_overhead: 0.1 — has no effect in stage 'main'",
        ),
        (
            BASE + 'integration = "auto"\n[execution]\nsave_every = "auto"\n'
            "max_save_overhead = 1.0",
            "execution.max_save_overhead: 1.0 — must be less than 1",
        ),
        (
            BASE + 'integration = "auto"\n[execution]\nsave_every = "auto"\nmax_save_overhead = 0',
            "execution.max_save_overhead: 0 — must be greater than 0",
        ),
        (
            BASE + 'integration = "auto"\n[execution]\nsave_every = "auto"\n'
            'max_save_overhead = "5%"',
            "execution.max_save_overhead: '5%' — must be a number",
        ),
    ],
)
def test_refused_with_path_value_and_rule(refused, text, line):
    problems = refused(text)
    assert any(line in problem for problem in problems), problems


def test_resume_from_given_on_the_command_line_wins_over_the_file(write):
    # The overrides (`nodus.resolve(..., overrides=...)`) are what `--resume-from` sets; the
    # source run itself is checked at submit (tests/runner/test_runner_branches.py).
    path = write(BASE + 'resume_from = "run_1@40"')
    assert resolve_file(path).resume_from == "run_1@40"
    assert resolve_file(path, overrides={"resume_from": "run_2@8"}).resume_from == "run_2@8"


def test_a_cadence_that_reaches_one_integrated_stage_is_accepted(resolved):
    text = BASE + (
        "[execution]\nsave_every = 5\n"
        '[[stages]]\nname = "prep"\n'
        '[[stages]]\nname = "train"\nintegration = "hf-trainer-v1"\n'
    )
    prep, train = resolved(text).stages
    assert (prep.integration, train.integration) == (None, "hf-trainer-v1")
    assert train.execution.save_every == 5


def test_auto_cadence_resolves_with_its_bound(resolved):
    text = BASE + 'integration = "hf-trainer-v1"\n[execution]\nsave_every = "auto"\n'
    execution = resolved(text).stages[0].execution
    assert (execution.save_every, execution.max_save_overhead) == ("auto", 0.035)
    bound = resolved(text + "max_save_overhead = 0.1").stages[0].execution.max_save_overhead
    assert bound == 0.1


@pytest.mark.parametrize(
    "path, rule",
    [
        ("../x", "paths must stay inside the code folder"),
        ("a/../../x", "paths must stay inside the code folder"),
        ("/etc/passwd", "paths must be relative to the code folder, not absolute"),
        (".nodus", "private to the runner"),
        (".nodus/control", "private to the runner"),
        ("./.nodus/x", "private to the runner"),
        ("a\\nb", "control characters"),
        ("a\\u0007b", "control characters"),
        ("", "paths must not be empty"),
        ("é" * 257, "at most 512 UTF-8 bytes (this one has 514)"),
    ],
)
def test_path_rules(refused, path, rule):
    second = STAGE.replace('"s"', '"t"')
    text = BASE + STAGE + second + f'[stages.continuity]\ncheckpoint_paths = ["ok", "{path}"]'
    (problem,) = refused(text)
    assert problem.startswith("stages[1].continuity.checkpoint_paths[1]: ")
    assert rule in problem


@pytest.mark.parametrize(
    "path", [".", "state", "a/b.json", "é" * 256, ".nodusx", "x/.nodus", "a..b"]
)
def test_paths_that_are_fine(resolved, path):
    text = BASE + f'[continuity]\ncheckpoint_paths = ["{path}"]'
    assert resolved(text).stages[0].continuity.checkpoint_paths[0] == path


@pytest.mark.parametrize(
    "name, rule",
    [
        ("", "give the name of a file the program writes into each checkpoint folder"),
        ("sub/DONE", "directly inside the checkpoint folder"),
        ("../DONE", "directly inside the checkpoint folder"),
        ("/DONE", "directly inside the checkpoint folder"),
        ("..", "directly inside the checkpoint folder"),
        (".", "directly inside the checkpoint folder"),
        ("DO\\nNE", "control characters"),
        ("é" * 257, "at most 512 UTF-8 bytes (this one has 514)"),
    ],
)
def test_checkpoint_complete_rules(refused, name, rule):
    text = BASE + STAGE + f'[stages.continuity]\ncheckpoint_complete = "{name}"'
    (problem,) = refused(text)
    assert problem.startswith("stages[0].continuity.checkpoint_complete: ") and rule in problem


@pytest.mark.parametrize("name", ["DONE", ".complete", "trainer_state.json", "a..b", "é" * 256])
def test_checkpoint_complete_names_that_are_fine(resolved, name):
    text = BASE + f'[continuity]\ncheckpoint_complete = "{name}"'
    assert resolved(text).stages[0].continuity.checkpoint_complete == name


def test_at_most_64_paths(refused, resolved):
    many = ", ".join(f'"p{i}"' for i in range(64))
    (stage,) = resolved(BASE + f"[continuity]\ncheckpoint_paths = [{many}]").stages
    assert len(stage.continuity.checkpoint_paths) == 64
    (problem,) = refused(BASE + f'[continuity]\ncheckpoint_paths = [{many}, "one-more"]')
    assert problem.startswith("continuity.checkpoint_paths: ") and "at most 64 items" in problem


def test_every_problem_of_a_file_is_reported_at_once(write):
    path = write(
        'name = "Bad"\ncommand = ["python"]\ninterrupt_tolerance = 1\n'
        '[continuity]\ncheckpoint_paths = ["../x", "/abs"]\n'
        '[[stages]]\nname = "s"\ncontinuity = { checkpoint_paths = [".nodus"] }\n'
    )
    with pytest.raises(WorkloadError) as caught:
        resolve_file(path)
    lines = str(caught.value).splitlines()
    assert lines == [
        f"{path}: continuity.checkpoint_paths[0]: '../x' — paths must stay inside the code folder",
        f"{path}: continuity.checkpoint_paths[1]: '/abs' — paths must be relative to the code "
        "folder, not absolute",
        f"{path}: name: 'Bad' — names use lowercase letters, digits, '.', '_' and '-', and start "
        "with a letter or digit",
        f"{path}: stages[0].continuity.checkpoint_paths[0]: '.nodus' — '.nodus' is private to "
        "the runner and cannot be selected",
        f"{path}: interrupt_tolerance: not an input: interruption behaviour derives from "
        "continuity (mode and resume_on_interruption)",
    ]


def test_resolution_problems_are_reported_together(refused):
    text = BASE + (
        'integration = "auto"\n[continuity]\nmode = "restartable"\ncheckpoint_paths = ["x"]\n'
        '[[stages]]\nname = "a"\n[[stages]]\nname = "a"\ncode = "nowhere"\n'
    )
    problems = refused(text)
    assert len(problems) == 6, problems  # duplicate name, missing code, 2 × 2 integration rules


METHOD = '[method]\nbase_model = "models/base"\ndataset = "data/train.jsonl"\nmax_steps = 10\n'


@pytest.mark.parametrize(
    "text, line",
    [
        (
            'name = "w"\nframework = "sft"\n' + METHOD,
            "method.base_model: 'models/base' — not a local folder",
        ),
        ('name = "w"\nframework = "sft"', "method: framework = 'sft' needs a [method] table"),
        (
            'name = "w"\nframework = "rlhf"\n' + METHOD,
            "framework: 'rlhf' — must be 'sft', 'dpo' or 'grpo'",
        ),
        (BASE + METHOD, "method: a [method] table needs framework"),
        (
            'name = "w"\nframework = "grpo"\n' + METHOD,
            "method.reward_functions: grpo needs at least one",
        ),
        (
            'name = "w"\nframework = "sft"\n' + METHOD + 'reward_functions = ["m:f"]',
            "reward functions are used by grpo only",
        ),
        (
            'name = "w"\nframework = "grpo"\n' + METHOD + 'reward_functions = ["nope"]',
            "method.reward_functions[0]: 'nope' — reward functions are named 'module:function'",
        ),
        (
            'name = "w"\nframework = "sft"\n' + METHOD + "num_epochs = 2",
            "method: give exactly one of max_steps and num_epochs",
        ),
        (
            'name = "w"\nframework = "sft"\n' + METHOD + "lora_dropout = 1.5",
            "method.lora_dropout: 1.5 — must be less than 1",
        ),
        (
            'name = "w"\nframework = "sft"\n[method]\ndataset = "d"\nmax_steps = 1',
            "method.base_model: required",
        ),
        (
            'name = "w"\nframework = "sft"\n'
            + METHOD
            + STAGE
            + '[stages.continuity]\ncheckpoint_paths = ["x"]',
            "stages[0].continuity.checkpoint_paths: ['x'] — stage-specific checkpoint_paths "
            "cannot be combined with a framework shortcut",
        ),
    ],
)
def test_framework_shortcut_is_parsed_and_checked(refused, text, line):
    problems = refused(text)
    assert any(line in problem for problem in problems), problems


def test_shortcut_with_workload_paths_without_state_is_refused(refused):
    text = 'name = "w"\nframework = "dpo"\n[continuity]\ncheckpoint_paths = ["x"]\n' + METHOD
    problems = refused(text)
    assert any("needs the state folder saved" in p and "'train'" in p for p in problems), problems


@pytest.mark.parametrize(
    "content, fragment",
    [
        ('name = "w"\ncommand = [1,\n', "TOML syntax error at line 3, column 1"),
        ('name = "w"\n[a\n', "TOML syntax error at line 2, column 3"),
        ('name = "w"\nname = "v"\n', "TOML syntax error at line 2"),
        ('name = "w\n', "TOML syntax error at line 1"),
    ],
)
def test_toml_syntax_errors_give_line_and_column(write, content, fragment):
    with pytest.raises(WorkloadError) as caught:
        resolve_file(write(content))
    assert fragment in str(caught.value)


def test_unreadable_files_are_refused(tmp_path):
    (tmp_path / "binary.toml").write_bytes(b'name = "\xff"')
    cases = {
        tmp_path / "missing.toml": "no such file",
        tmp_path: "is a folder",
        tmp_path / "binary.toml": "not UTF-8 text",
    }
    for path, fragment in cases.items():
        with pytest.raises(WorkloadError) as caught:
            resolve_file(path)
        assert str(caught.value).startswith(f"{path}: ") and fragment in str(caught.value)


@pytest.mark.parametrize(
    "path, rule",
    [
        ("../logs", "paths must stay inside the code folder"),
        ("/var/log/tb", "paths must be relative to the code folder, not absolute"),
        (".nodus/events", "private to the runner"),
        ("", "paths must not be empty"),
    ],
)
def test_a_metrics_place_is_a_path_inside_the_code_folder(refused, path, rule):
    (problem,) = refused(BASE + f'[continuity]\nmetrics = "{path}"')
    assert problem.startswith("continuity.metrics: ") and rule in problem


def test_a_metrics_place_resolves_short_and_is_inherited_by_each_stage(resolved):
    text = BASE + '[continuity]\nmetrics = "./logs/tb/"\n' + STAGE
    assert resolved(text).stages[0].continuity.metrics == "logs/tb"
    assert resolved(BASE).stages[0].continuity.metrics is None


def test_a_metrics_place_is_refused_where_the_trainer_integration_records_them(refused, resolved):
    (problem,) = refused(BASE + 'integration = "hf-trainer-v1"\n[continuity]\nmetrics = "runs"')
    assert problem.startswith("continuity.metrics: 'runs' — has no effect in stage 'main'")
    assert "records the Trainer's logged metrics itself" in problem
    # under "auto" a program left unprepared logs on its own: there it counts
    text = BASE + 'integration = "auto"\n[continuity]\nmetrics = "runs"'
    assert resolved(text).stages[0].continuity.metrics == "runs"
