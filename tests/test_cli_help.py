"""A command line that helps: close matches for mistyped words under the mistaken command's own
usage, ``-V``, commands in the order of use, phases in any case, ``runs wait --timeout`` and
``validate --json``, through the real ``nodus`` main (and once as a real process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nodus import __version__
from nodus.cli import main
from nodus.cli.parsing import COMMAND_ORDER, invalid_choice, nearest, unrecognized
from nodus.runner.catalog.core import Catalog
from nodus.runner.catalog.phases import Phase
from run_phases import move_to


def refused(capsys, *line: str) -> str:
    """What the line prints on stderr; it must be refused with exit 2."""
    with pytest.raises(SystemExit) as done:
        main(list(line))
    assert done.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("word", "offered", "meant"),
    [
        ("rnu", ["run", "runs", "validate"], "run"),
        ("lst", ["list", "get", "logs"], "list"),
        ("--detatch", ["--detach", "--json", "--key"], "--detach"),
        ("--limt", ["--limit", "--offset"], "--limit"),
        ("xyzzy", ["run", "runs"], None),
    ],
)
def test_the_nearest_word_is_found_or_none(word, offered, meant):
    assert nearest(word, offered) == meant


def test_refusal_texts_name_the_close_match_and_keep_every_choice():
    assert invalid_choice("sav", ["save", "latest"]) == (
        "invalid choice: 'sav'; did you mean 'save'? (choose from 'save', 'latest')"
    )
    assert invalid_choice("zzz", ["save", "latest"]) == (
        "invalid choice: 'zzz' (choose from 'save', 'latest')"
    )
    assert unrecognized(["--detatch"], ["--detach", "--json"]) == (
        "unrecognized argument: '--detatch' (did you mean '--detach'?)"
    )
    assert unrecognized(["--zz", "x"], ["--detach"]) == "unrecognized arguments: '--zz', 'x'"


def test_a_mistyped_command_names_the_closest_one(capsys):
    error = refused(capsys, "rnu")
    assert error.startswith("usage: nodus [")
    assert "invalid choice: 'rnu'; did you mean 'run'?" in error


def test_a_mistyped_subcommand_shows_its_groups_usage(capsys):
    error = refused(capsys, "runs", "lst")
    assert error.startswith("usage: nodus runs ")
    assert "did you mean 'list'?" in error


@pytest.mark.parametrize(
    ("line", "usage", "meant"),
    [
        (("run", "--detatch", "w.toml"), "usage: nodus run ", "'--detach'"),
        (("run", "w.toml", "--detatch"), "usage: nodus run ", "'--detach'"),
        (("runs", "list", "--phse", "FAILED"), "usage: nodus runs list ", "'--phase'"),
        (("runs", "pause", "r", "--checkpoint", "sav"), "usage: nodus runs pause ", "'save'"),
        (("completion", "bsh"), "usage: nodus completion ", "'bash'"),
    ],
)
def test_a_mistyped_option_or_choice_shows_the_commands_own_usage(capsys, line, usage, meant):
    error = refused(capsys, *line)
    assert error.startswith(usage)
    assert f"did you mean {meant}?" in error
    assert "Traceback" not in error


@pytest.mark.slow
def test_a_mistyped_command_line_exits_2_without_a_traceback_in_a_real_process():
    done = subprocess.run(
        [sys.executable, "-m", "nodus", "run", "--detatch", "w.toml"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: nodus run ")
    assert done.stderr.rstrip().endswith("did you mean '--detach'?)")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flags_print_the_installed_version_in_one_line(capsys, flag):
    with pytest.raises(SystemExit) as done:
        main([flag])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"nodus {__version__}\n"


def listed(out: str) -> list[str]:
    """The command names ``--help`` lists, in order."""
    lines = out.split("  COMMAND\n" if "  COMMAND\n" in out else "  SUBCOMMAND\n")[1]
    names = []
    for line in lines.splitlines():
        if not line.strip():
            break
        if line.startswith("    ") and not line.startswith("     "):
            names.append(line.split()[0])
    return names


def test_help_lists_commands_in_the_order_of_use(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    names = listed(capsys.readouterr().out)
    assert names[:3] == ["run", "runs", "validate"]
    assert names == [name for name in COMMAND_ORDER[""] if name in names]
    with pytest.raises(SystemExit):
        main(["runs", "--help"])
    runs = listed(capsys.readouterr().out)
    assert runs[:5] == ["list", "get", "logs", "wait", "resume"]
    assert runs[-1] == "delete"  # the one that destroys, last


@pytest.fixture
def catalog(tmp_path):
    catalog = Catalog(str(tmp_path / "home"))
    yield catalog
    catalog.close()


def make_run(catalog: Catalog, name: str, phase: Phase | None = None) -> str:
    run_id = catalog.create_run(
        name=name, workload={}, store="", key=None, lock_name=f"lock-{name}", stage_names=["main"]
    )
    if phase is not None:
        move_to(catalog, run_id, phase, stage="main")
    return run_id


@pytest.mark.parametrize("phase", ["succeeded", "Succeeded", "SUCCEEDED"])
def test_a_phase_is_taken_in_any_case(capsys, catalog, phase):
    done = make_run(catalog, "done", Phase.SUCCEEDED)
    make_run(catalog, "failed", Phase.FAILED)
    assert main(["--home", catalog.home, "runs", "list", "--json", "--phase", phase]) == 0
    assert [run["id"] for run in json.loads(capsys.readouterr().out)] == [done]


def test_an_unknown_phase_is_still_refused_naming_the_phases(capsys, catalog):
    assert main(["--home", catalog.home, "runs", "list", "--phase", "finished"]) == 2
    error = capsys.readouterr().err
    assert "phase 'FINISHED'" in error and "SUCCEEDED" in error


def test_runs_wait_gives_up_after_its_timeout_with_its_own_status(capsys, catalog):
    # A run just accepted (QUEUED) waits for its runner: nothing moves it within the timeout.
    run_id = make_run(catalog, "queued")
    assert main(["--home", catalog.home, "runs", "wait", run_id, "--timeout", "0"]) == 124
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"nodus: {run_id} is still QUEUED after 0s of waiting")


def test_runs_wait_timeout_is_a_number_of_seconds(capsys):
    error = refused(capsys, "runs", "wait", "r", "--timeout", "soon")
    assert error.startswith("usage: nodus runs wait ")
    assert "'soon': give a number of seconds, 0 or more" in error


def test_runs_wait_timeout_does_not_touch_a_run_that_stopped(capsys, catalog):
    run_id = make_run(catalog, "done", Phase.FAILED)
    status = main(["--home", catalog.home, "runs", "wait", run_id, "--timeout", "0", "--json"])
    assert status == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "FAILED"


# --- validate --json ----------------------------------------------------------------------------

BROKEN = """name = "x"
[[stages]]
name = "a"
comand = ["python", "t.py"]
[stages.continuity]
mode = "checkpointd"
"""


def test_validate_json_lists_every_problem_with_path_value_and_fix(capsys, tmp_path):
    (tmp_path / "w.toml").write_text(BROKEN)
    assert main(["validate", "--json", str(tmp_path / "w.toml")]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["valid"] is False and document["file"] == str(tmp_path / "w.toml")
    by_path = {problem["path"]: problem for problem in document["problems"]}
    assert by_path["stages[0].comand"] == {
        "path": "stages[0].comand",
        "value": None,
        "fix": "unknown key 'comand'; did you mean 'command'?",
        "suggestion": "command",
    }
    mode = by_path["stages[0].continuity.mode"]
    assert mode["value"] == "checkpointd" and mode["suggestion"] == "checkpointed"
    assert "'checkpointed' or 'restartable'" in mode["fix"]


def test_validate_json_of_a_missing_file_is_one_problem(capsys, tmp_path):
    assert main(["validate", "--json", str(tmp_path / "none.toml")]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["valid"] is False
    assert [p["fix"] for p in document["problems"]] == ["no such file"]


def test_validate_json_of_a_valid_file_gives_its_name_and_stages(capsys, tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "w.toml").write_text('name = "nightly"\ncommand = ["python", "train.py"]\n')
    assert main(["validate", "--json", str(tmp_path / "w.toml")]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["valid"] is True and document["name"] == "nightly"
    [stage] = document["stages"]
    assert stage["name"] == "main" and stage["mode"] == "checkpointed"
    assert stage["captures"] == ["state"] and "once more when the program exits" in stage["plan"]
    assert document["warnings"] == []
