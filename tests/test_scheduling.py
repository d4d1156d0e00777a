"""The table of heaviest tests (:mod:`scheduling`) names tests that exist, and orders only them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import scheduling

REPO = Path(__file__).resolve().parents[1]


def test_every_listed_test_is_defined_in_its_file():
    for path, tests in scheduling.SECONDS.items():
        source = (REPO / path).read_text()
        for name in tests:
            function = name.split("[", 1)[0]  # a parametrized test's case aside
            assert re.search(rf"^def {function}\(", source, re.MULTILINE), f"{path}::{name}"


@dataclass
class Item:
    nodeid: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return "mark" if name == "slow" and self.slow else None


def test_the_listed_tests_go_first_longest_first_then_the_slow_then_the_quick():
    trl = "tests/hf/test_ext_trl.py::test_nodus_qualify_extension_trl_passes_for_sft_and_dpo"
    readme = "tests/test_readme_blocks.py::test_a_runnable_block_runs_as_written[README.md]"
    items = [
        Item("tests/a.py::quick"),
        Item(readme, slow=True),
        Item("tests/b.py::slow@g", slow=True),
        Item("tests/c.py::quick"),
        Item(f"{trl}@grp", slow=True),
        Item("tests/d.py::slow", slow=True),
    ]
    ordered = [item.nodeid for item in scheduling.longest_first(items)]
    assert ordered == [
        f"{trl}@grp",
        readme,
        "tests/b.py::slow@g",
        "tests/d.py::slow",
        "tests/a.py::quick",
        "tests/c.py::quick",
    ]
