import nodus
from nodus.cli import main


def test_version_is_exposed():
    assert nodus.__version__


def test_help_exits_zero(capsys):
    try:
        main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert "nodus" in capsys.readouterr().out
