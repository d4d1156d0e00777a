"""Property: whatever document is thrown at ``validate``, it is accepted or refused with exit 2.

Documents mix the real keys (so validation goes deep) with random keys, types, nesting,
unicode and huge lists. Anything but a ``NodusError`` with exit status 2 would reach a user
as a traceback.
"""

from __future__ import annotations

import collections
import datetime
import math

import pytest
import tomli_w
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from nodus.errors import NodusError
from nodus.schemas.loader import resolve_file, workload_from_document
from nodus.schemas.models import Continuity, Execution, Method, Stage, Workload
from nodus.schemas.resolve import resolve

KNOWN_KEYS = sorted(
    {
        *Workload.model_fields,
        *Stage.model_fields,
        *Continuity.model_fields,
        *Execution.model_fields,
        *Method.model_fields,
        "interrupt_tolerance",
    }
)
WORDS = [
    "checkpointed",
    "restartable",
    "auto",
    "hf-trainer-v1",
    "none",
    "sft",
    "grpo",
    "state",
    ".",
    "./state",
    "../x",
    "/abs",
    ".nodus",
    ".nodus/a",
    "python train.py",
    "python 'x",
    "run_a@3",
    "run_a/train@0",
    "ckpt_00ff",
    "main",
    "m:f",
    "",
    "é" * 300,
    "a\x00b",
    "NODUS_X",
]

# Generation is kept cheap (hypothesis spends most of its time drawing, not in nodus): small
# recursive values, and huge lists built by repetition rather than drawn element by element.
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=8))
words = st.sampled_from(WORDS)
scalars = st.one_of(
    words,
    st.text(max_size=8),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.booleans(),
    st.sampled_from([datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.date(2024, 1, 2)]),
)
huge_lists = st.builds(lambda word, n: [word] * n, words, st.integers(65, 300))
# Two levels here; tables and stages below add more (st.recursive costs far more to draw).
values = st.one_of(
    scalars,
    huge_lists,
    st.lists(scalars, max_size=4),
    st.dictionaries(keys, scalars, max_size=4),
    st.dictionaries(keys, st.lists(scalars, max_size=3), max_size=3),
    st.lists(st.dictionaries(keys, scalars, max_size=3), max_size=3),
)
tables = st.dictionaries(keys, values, max_size=6)
stage_like = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["a", "b", "main"]), values)},
    optional={key: values for key in Stage.model_fields if key != "name"}
    | {"continuity": st.one_of(words, tables)},
)
near_valid = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["w", "Bad"]), values)},
    optional={
        "command": st.one_of(words, st.lists(words, max_size=3)),
        "code": st.sampled_from([".", "missing", "", "a\x01"]),
        "continuity": st.one_of(words, tables),
        "execution": tables,
        "stages": st.one_of(st.lists(stage_like, max_size=3), values),
        "framework": st.one_of(words, values),
        "method": tables,
        "integration": words,
        "env": st.dictionaries(st.text(max_size=6), values, max_size=3),
        "outputs": st.one_of(huge_lists, st.lists(words, max_size=4)),
        "resume_from": st.one_of(words, values),
        "interrupt_tolerance": values,
    },
)
# Mostly valid documents, so resolution (inheritance and its cross-field rules) is reached too.
sane_paths = st.lists(
    st.sampled_from(["state", ".", "ckpts", "./state/", "../x", "a/b"]), max_size=3
)
sane_continuity = st.one_of(
    st.sampled_from(["checkpointed", "restartable"]),
    st.fixed_dictionaries(
        {},
        optional={
            "mode": st.sampled_from(["checkpointed", "restartable"]),
            "resume_on_interruption": st.booleans(),
            "checkpoint_paths": sane_paths,
            "checkpoint_complete": st.sampled_from(["DONE", "", "a/DONE", ".."]),
        },
    ),
)
sane_fields = {
    "continuity": sane_continuity,
    "integration": st.sampled_from(["auto", "hf-trainer-v1", "none"]),
    "execution": st.dictionaries(
        st.sampled_from(sorted(Execution.model_fields)), st.integers(-1, 100), max_size=3
    ),
    "env": st.dictionaries(st.sampled_from(["A", "B", "NODUS_X"]), st.text(max_size=3), max_size=2),
    "outputs": sane_paths,
}
plausible = st.fixed_dictionaries(
    {"name": st.just("w"), "command": st.just("python train.py")},
    optional={
        **sane_fields,
        "stages": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["a", "b", "c"])}, optional=sane_fields),
            min_size=1,
            max_size=3,
        ),
    },
)
documents = st.one_of(near_valid, plausible, tables)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.slow  # two thousand generated documents
def test_any_document_is_accepted_or_refused_with_exit_2(folder):
    outcomes: collections.Counter[str] = collections.Counter()

    @settings(
        max_examples=2000,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(document=documents)
    def check(document):
        try:
            text = tomli_w.dumps(document)
        except (TypeError, ValueError):  # not expressible in TOML (a top-level value it refuses)
            assume(False)
        path = folder / "workload.toml"
        path.write_text(text, encoding="utf-8")
        try:
            resolved = resolve_file(path)
        except NodusError as error:
            assert error.exit_status == 2
            assert str(error)  # a message a person can read
            outcomes["refused"] += 1
        else:
            assert resolved.stages and all(stage.command for stage in resolved.stages)
            outcomes["accepted"] += 1
            outcomes["accepted with stages"] += len(resolved.stages) > 1

    check()
    # Not vacuous: the documents reach both sides, and resolution of several stages (the
    # cross-field rules of inheritance), not only the first refusal at the top.
    # (One run: 1,824 refused, 176 accepted, 13 of them with several stages.)
    assert outcomes["refused"] >= 200 and outcomes["accepted"] >= 50, outcomes
    assert outcomes["accepted with stages"] >= 3, outcomes


@settings(max_examples=300, deadline=None)
@given(document=st.dictionaries(keys, st.one_of(values, st.none(), st.tuples(scalars))))
def test_python_values_from_the_sdk_never_escape_as_other_errors(folder, document):
    try:
        resolve(workload_from_document(document), base_dir=str(folder))
    except NodusError as error:
        assert error.exit_status == 2


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("[]{}=\"'.,\n #a1-_ésx\\\t")), max_size=60))
def test_arbitrary_text_is_refused_cleanly(folder, text):
    path = folder / "text.toml"
    path.write_text(text, encoding="utf-8")
    try:
        resolve_file(path)
    except NodusError as error:
        assert error.exit_status == 2


def test_deeply_nested_toml_is_refused_cleanly(write):
    with pytest.raises(NodusError):
        resolve_file(write("name = " + "[" * 5000 + "]" * 5000))


def test_nan_is_not_a_number_of_seconds():
    assert not math.isfinite(float("nan"))
    with pytest.raises(NodusError):
        Workload(name="w", command="x", execution={"grace_period": float("nan")})
