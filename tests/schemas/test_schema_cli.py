"""``nodus validate``, ``nodus resolve`` and ``nodus schema`` as a person runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import jsonschema
import pytest

from nodus.cli import main
from nodus.schemas import defaults

WORKLOAD = """\
name = "tiny-sft"
command = ["python", "train.py"]
integration = "hf-trainer-v1"
outputs = ["out/model"]
env = { WANDB_MODE = "disabled" }

[continuity]
checkpoint_paths = ["state", "progress.json"]

[execution]
save_every = 10

[[stages]]
name = "train"

[[stages]]
name = "eval"
command = "python eval.py"
integration = "none"
continuity = "restartable"
"""


def nodus(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """The real command line in a subprocess, as a shell or cron would run it."""
    env = {**os.environ, "NODUS_DEBUG": ""}
    return subprocess.run(
        [sys.executable, "-m", "nodus", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.mark.slow  # the real `nodus` command line
def test_validate_accepts_a_good_file(write):
    path = write(WORKLOAD)
    proc = nodus("validate", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith(f"{path}: ok (2 stages)\n")
    # then, per stage, when its selection is captured and how the step is found
    assert "  train: captures state, progress.json (checkpointed)\n" in proc.stdout
    assert "hf-trainer-v1 saves state/checkpoint-<step> every 10 steps" in proc.stdout


@pytest.mark.slow  # the real `nodus` command line
def test_validate_warns_that_auto_may_leave_a_stage_unprotected(write):
    path = write('name = "w"\ncommand = ["python", "train.py"]\nintegration = "auto"\n')
    proc = nodus("validate", str(path))
    assert proc.returncode == 0 and proc.stdout.startswith(f"{path}: ok (1 stage)\n")
    assert "warning: stage 'main': integration = \"auto\" runs a Trainer outside" in proc.stderr
    assert "only what the program saves by itself into state protects it" in proc.stderr
    explicit = write(
        'name = "w"\ncommand = ["python", "train.py"]\nintegration = "hf-trainer-v1"\n'
    )
    assert nodus("validate", str(explicit)).stderr == ""


@pytest.mark.slow  # the real `nodus` command line
def test_validate_refuses_with_one_line_per_problem_and_exit_2(write):
    path = write(
        'name = "w"\ncommand = "x"\n[[stages]]\nname = "train"\n'
        '[[stages]]\nname = "eval"\ncontinuity = { checkpoint_paths = ["../x", "ok", "/y"] }\n'
    )
    proc = nodus("validate", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{path}: stages[1].continuity.checkpoint_paths[0]: '../x' — paths must stay inside "
        "the code folder",
        f"{path}: stages[1].continuity.checkpoint_paths[2]: '/y' — paths must be relative to "
        "the code folder, not absolute",
    ]


@pytest.mark.slow  # the real `nodus` command line
@pytest.mark.parametrize(
    "content", [b"name = [\n", b"\xff\xfe", b'name = "w"\ncommand = "x"\nstages = 5\n']
)
def test_no_traceback_for_broken_files(write, tmp_path, content):
    path = tmp_path / "broken.toml"
    path.write_bytes(content)
    proc = nodus("validate", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and str(path) in proc.stderr


def test_resolve_json_is_the_stored_shape(write, capsys):
    path = write(WORKLOAD)
    assert main(["resolve", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    train, evaluate = data["stages"]
    assert data["name"] == "tiny-sft"
    assert train == {
        "name": "train",
        "command": ["python", "train.py"],
        "code": str(path.parent),
        "env": {"WANDB_MODE": "disabled"},
        "outputs": ["out/model"],
        "integration": "hf-trainer-v1",
        "continuity": {
            "mode": "checkpointed",
            "resume_on_interruption": True,
            "checkpoint_paths": ["state", "progress.json"],
            "checkpoint_complete": None,
            "checkpoint_name": None,
            "resume_args": [],
            "metrics": None,
            "step_key": None,
        },
        "execution": {
            "save_every": 10,
            "save_each_epoch": defaults.SAVE_EACH_EPOCH,
            "keep_recoverable": defaults.KEEP_RECOVERABLE,
            "keep_adapters": defaults.KEEP_ADAPTERS,
            "max_recoveries": defaults.MAX_RECOVERIES,
            "grace_period": defaults.GRACE_PERIOD_S,
            "retention_days": defaults.RETENTION_DAYS,
            "max_save_overhead": defaults.MAX_SAVE_OVERHEAD,
            "max_source_bytes": defaults.MAX_SOURCE_BYTES,
            "unrecorded_retry": defaults.UNRECORDED_RETRY_S,
            "backend": "local",
            "cpus": defaults.RAY_CPUS,
            "memory": 0,
            "gpu_count": 0,
            "nodes": 1,
            "shared_store": False,
            "partition": None,
            "account": None,
            "qos": None,
            "time_limit": None,
            "signal_lead": defaults.SLURM_SIGNAL_LEAD_S,
            "sbatch_options": [],
            "hang_timeout": defaults.HANG_TIMEOUT,
        },
        "secrets": [],
    }
    assert evaluate["integration"] is None
    assert evaluate["continuity"]["mode"] == "restartable"


def test_resolve_toml_prints_the_same_values(write, capsys):
    path = write(WORKLOAD)
    main(["resolve", str(path), "--json"])
    as_json = json.loads(capsys.readouterr().out)
    main(["resolve", str(path), "--toml"])
    as_toml = tomllib.loads(capsys.readouterr().out)
    # TOML has no null: keys that are null in JSON are absent
    assert "integration" not in as_toml["stages"][1]
    as_toml["stages"][1]["integration"] = None
    for stage in as_toml["stages"]:
        for key in ("checkpoint_complete", "checkpoint_name", "metrics", "step_key"):
            assert key not in stage["continuity"]
            stage["continuity"][key] = None
        for key in ("partition", "account", "qos", "time_limit"):  # Slurm's, unset
            assert key not in stage["execution"]
            stage["execution"][key] = None
    assert as_toml["stages"] == as_json["stages"]


@pytest.mark.parametrize("fmt", ["--json", "--toml"])
def test_resolve_submission_keeps_omission(write, capsys, fmt):
    path = write('name = "w"\ncommand = "python t.py"\n[[stages]]\nname = "a"\n')
    main(["resolve", str(path), "--submission", fmt])
    out = capsys.readouterr().out
    data = json.loads(out) if fmt == "--json" else tomllib.loads(out)
    assert data == {
        "name": "w",
        "command": ["python", "t.py"],
        "continuity": {"mode": "checkpointed", "resume_on_interruption": True},
        "stages": [{"name": "a"}],
    }


def test_schema_is_usable_by_editors(capsys, write):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    good = tomllib.loads(WORKLOAD)
    assert list(validator.iter_errors(good)) == []
    for bad in (
        {**good, "comand": "x"},
        {**good, "continuity": "sometimes"},
        {**good, "name": "Upper"},
        {**good, "execution": {"save_every": "50"}},
        {**good, "continuity": {"checkpoint_complete": 1}},
    ):
        assert list(validator.iter_errors(bad)), bad


@pytest.mark.slow  # the real `nodus` command line
def test_validate_describes_only_what_the_selection_can_hold(write):
    """nanoGPT's ``out/ckpt.pt`` or Lightning's ``checkpoints/``: no ``state`` in the
    selection, so no ``state/checkpoint-<step>`` folder can be captured and none is described."""
    path = write(
        'name = "w"\ncommand = ["python", "train.py"]\n\n'
        '[continuity]\ncheckpoint_paths = ["out/ckpt.pt", "checkpoints"]\n'
    )
    proc = nodus("validate", str(path))
    assert proc.returncode == 0, proc.stderr
    settle = f"{defaults.settle_s():g}"
    assert proc.stdout.splitlines()[1:] == [
        "  main: captures out/ckpt.pt, checkpoints (checkpointed)",
        f"    the whole selection once unchanged for {settle} s and whole (step: checkpoint-N, "
        "checkpoint_N, ckpt_N, step_N, stepN, global_stepN, epoch=E-step=S, iter_N, "
        "iteration_N; else in a torch.save checkpoint global_step, iter_num, step, iteration; "
        "else the capture's count)",
        "    once more when the program exits",
    ]
    with_state = write(
        'name = "w"\ncommand = ["python", "train.py"]\n\n'
        '[continuity]\ncheckpoint_paths = ["state"]\n'
    )
    shown = nodus("validate", str(with_state)).stdout
    assert f"    each state/checkpoint-<step> folder once unchanged for {settle} s" in shown
