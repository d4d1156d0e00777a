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


def test_the_listed_tests_go_first_longest_first_and_the_rest_keep_their_order():
    trl = "tests/hf/test_ext_trl.py::test_nodus_qualify_extension_trl_passes_for_sft_and_dpo"
    readme = "tests/test_readme_blocks.py::test_a_runnable_block_runs_as_written[README.md]"
    items = [Item("tests/a.py::x"), Item(readme), Item("tests/b.py::y@g"), Item(f"{trl}@grp")]
    ordered = [item.nodeid for item in scheduling.longest_first(items)]
    assert ordered == [f"{trl}@grp", readme, "tests/a.py::x", "tests/b.py::y@g"]
