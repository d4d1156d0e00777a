import pytest

import nodus
from nodus.cli import build_parser, main


def test_version_is_exposed():
    assert nodus.__version__


def test_help_exits_zero(capsys):
    try:
        main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert "nodus" in capsys.readouterr().out


def _command_lines():
    """Every command (and group subcommand) of the whole parser, as the words that name it."""
    commands = next(a for a in build_parser([])._actions if a.dest == "command").choices
    for name, parser in commands.items():
        subs = [a for a in parser._actions if a.dest == "subcommand"]
        if subs:
            yield from ([name, sub] for sub in subs[0].choices)
        else:
            yield [name]


def test_each_command_line_gets_its_own_command_parsed_whole(capsys, tmp_path):
    """The parser for a line builds only the command it names: each command's help is still
    its whole help, and options before the command are read as before."""
    lines = list(_command_lines())
    assert ["run"] in lines and ["runs", "list"] in lines and len(lines) >= 30
    for words in lines:
        with pytest.raises(SystemExit) as done:
            main(["--home", str(tmp_path), *words, "--help"])
        assert done.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: nodus {' '.join(words)} ")
    assert main([f"--home={tmp_path}", "runs", "list", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"


@pytest.mark.parametrize(
    ("line", "names"),
    [(["rn"], ["'run'", "'runs'", "'validate'"]), (["runs", "lst"], ["'list'", "'get'"])],
)
def test_a_mistyped_command_is_told_with_every_choice(capsys, line, names):
    with pytest.raises(SystemExit) as done:
        main(line)
    assert done.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice" in error and all(name in error for name in names)


def test_the_overview_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in ("run", "runs", "snapshots", "store", "models", "validate", "gc", "qualify"):
        assert f"\n    {name} " in out
