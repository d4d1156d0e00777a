"""Point 6: each profile violation is refused by explicit v1 and run unprepared under auto.

The program builds one Trainer per violation in one process, under a real `nodus run`. The data
collator rules (issue 11) are also checked on real Trainers built in this process.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from runner_e2e_helpers import Project

import doc_samples
from nodus import protocol
from nodus.schemas.defaults import ENV_IGNORE_SHIPPED_QUALIFICATIONS as IGNORE_SHIPPED
from nodus.stages.hf.inprocess import identity as identities
from nodus.stages.hf.inprocess import profile
from scheduling import ML_IN_PROCESS

pytestmark = pytest.mark.hf

# violation -> words its reason must contain
VIOLATIONS = {
    "fp16": "(fp16=True) on cpu: not supported yet on cpu",
    "subclass": "Trainer subclass",
    "workers": "dataloader_num_workers=2",
    "iterable": "streaming data",
    "peft": "PEFT",
    "save_only_model": "save_only_model=True",
    "load_best": "load_best_model_at_end=True",
    "collator_lm": "DataCollatorForLanguageModeling needs the hf-trainer-v1 extension 'collators'",
    "collator_function": "custom data collator (own_collator)",
    "collator_other_tokenizer": "DataCollatorWithPadding of a tokenizer that is not the Trainer's",
}


@pytest.fixture
def short_root():
    """A project folder with a short path.

    Under ``auto`` the ``workers`` violation trains with two DataLoader workers, which share
    tensors over an AF_UNIX socket made in ``$TMPDIR``: the attempt's private temp folder under
    ``$NODUS_HOME``. Below pytest's long tmp_path that socket's path passes the 108-byte limit
    and the workers hang (a limitation of the runner's TMPDIR, reported on its own).
    """
    root = Path(tempfile.mkdtemp(prefix="nodus-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _run(tmp_path, integration: str, kind: str) -> tuple[str, dict, str]:
    """Run the violations program; check one ``kind`` event per violation; the program's log,
    the run's ``runs get --json`` and what nodus said."""
    project = Project(
        tmp_path,
        program="violations.py",
        integration=integration,
        save_every=1,
        write_delay="0",
        env={"VIOLATIONS": ",".join(VIOLATIONS), "QUICKSTART_MAX_STEPS": "2"},
    )
    # Only this machine's own qualifications count (none): each extension the program uses is
    # refused (or run unprepared) naming the command that qualifies it.
    proc = project.nodus(
        "run", str(project.file), "--key", "v", timeout=600, env={IGNORE_SHIPPED: "1"}
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    view = project.get("v")
    log = project.log_of(view["stages"][0]["attempts"][0])
    events = [e for e in view["events"] if e["type"].startswith("integration_")]
    assert [e["type"] for e in events] == [kind] * len(VIOLATIONS)
    for (name, words), event in zip(VIOLATIONS.items(), events):
        assert any(words in reason for reason in event["reasons"]), (name, event)
    # refused or unprepared, nothing was saved: no save record, no snapshot holding a file
    assert not os.listdir(project.control("v", 1).saves)
    assert not [m for m in project.snapshots("v") if m.files]
    return log, view, proc.stderr


@pytest.mark.slow
def test_explicit_v1_refuses_each_violation_naming_its_reason(short_root):
    log, view, _ = _run(short_root, "hf-trainer-v1", "integration_refused")
    for name in VIOLATIONS:
        assert f"VIOLATION {name} refused 1" in log
    assert "trained" not in log
    # each refusal names the ways forward (which fit which refusal: tests/hf/test_trl_profile.py)
    for event in view["events"]:
        if event["type"] == "integration_refused":
            ways = event["ways_forward"]
            assert ways[-2].startswith('integration = "auto"') and "directory contract" in ways[-1]
    assert "ways forward:" in log


@pytest.mark.slow
def test_auto_runs_each_violation_unprepared_and_records_why(short_root):
    # unprepared means untouched: save_every=1 produced no integration saves
    log, view, said = _run(short_root, "auto", "integration_unprepared")
    for name in VIOLATIONS:
        assert f"VIOLATION {name} trained" in log
    # A green run that nothing could have continued says so, in its final line and runs get.
    final = said.strip().splitlines()[-1]
    assert "SUCCEEDED, unprotected: stage 'main' ended without a snapshot to continue" in final
    assert "the integration ran the program unprepared (" in final
    doc_samples.check("unprotected", said)
    assert view["protection"]["state"] == "unprotected"
    assert "load_best_model_at_end=True" in view["protection"]["why"]


# --- the data collator (issue 11 point 2), checked on real Trainers in this process ---------------


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The quick-start's builders, its tokenizer and a Trainer factory taking ``data_collator``."""
    from hf_helpers import QUICKSTART
    from transformers import Trainer

    spec = importlib.util.spec_from_file_location("quickstart_train", QUICKSTART / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tokenizer = module.build_tokenizer()
    data = module.build_dataset(tokenizer)
    model = module.build_model(tokenizer)
    out = tmp_path_factory.mktemp("trainer")

    def build(collator, processing_class=tokenizer):
        args = dataclasses.replace(module.training_arguments(), output_dir=str(out))
        return Trainer(
            model=model,
            args=args,
            train_dataset=data,
            processing_class=processing_class,
            data_collator=collator,
        )

    return SimpleNamespace(module=module, tokenizer=tokenizer, build=build)


# The collators below are made by functions of (transformers, tokenizer): Transformers is imported
# by the tests that use it, not when the suite is collected.


def _explicit(quickstart, make) -> list[str]:
    """The profile's reasons for a Trainer given ``make(transformers, tokenizer)`` as its data
    collator."""
    import transformers

    collator = make(transformers, quickstart.tokenizer)
    return profile.check(quickstart.build(collator), {"data_collator": collator})


@ML_IN_PROCESS
@pytest.mark.parametrize(
    "make",
    [
        lambda lib, tokenizer: None,
        lambda lib, tokenizer: lib.default_data_collator,
        lambda lib, tokenizer: lib.DataCollatorWithPadding(tokenizer),
        lambda lib, tokenizer: lib.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
        lambda lib, tokenizer: lib.DataCollatorWithPadding(
            tokenizer, padding="max_length", max_length=32
        ),
    ],
    ids=["none", "default_data_collator", "padding", "pad_to_multiple_of", "max_length"],
)
def test_the_library_default_collators_pass_when_given_explicitly(quickstart, make):
    assert _explicit(quickstart, make) == []


@functools.cache
def own_padding() -> type:
    """A subclass of the library's padding collator (made once, on first use)."""
    from transformers import DataCollatorWithPadding

    class OwnPadding(DataCollatorWithPadding):
        pass

    return OwnPadding


def shuffled_collator(features):
    from transformers import default_data_collator

    return default_data_collator(features[::-1])


@ML_IN_PROCESS
@pytest.mark.parametrize(
    "make, named",
    [
        (lambda lib, tokenizer: shuffled_collator, "custom data collator (shuffled_collator)"),
        (lambda lib, tokenizer: lambda features: features, "custom data collator (<lambda>)"),
        (lambda lib, tokenizer: own_padding()(tokenizer), "custom data collator (OwnPadding)"),
        (
            lambda lib, tokenizer: functools.partial(
                lib.default_data_collator, return_tensors="pt"
            ),
            "custom data collator (partial)",
        ),
    ],
    ids=["function", "lambda", "subclass", "partial"],
)
def test_other_collators_are_refused_naming_them(quickstart, make, named):
    reasons = _explicit(quickstart, make)
    assert len(reasons) == 1 and reasons[0].startswith(named), reasons


@ML_IN_PROCESS
def test_a_masking_collator_is_the_collators_extension_not_a_refusal(quickstart):
    from transformers import DataCollatorForLanguageModeling

    collator = DataCollatorForLanguageModeling(quickstart.tokenizer, mlm=False)
    found = profile.assess(quickstart.build(collator), {"data_collator": collator})
    assert found.reasons == []
    assert found.extensions == {"collators": "DataCollatorForLanguageModeling"}


@ML_IN_PROCESS
def test_padding_with_a_tokenizer_other_than_the_trainers_is_refused(quickstart):
    from transformers import DataCollatorWithPadding

    other = quickstart.module.build_tokenizer()  # equal in every way, but not the Trainer's own
    collator = DataCollatorWithPadding(other)
    for processing_class in (quickstart.tokenizer, None):
        trainer = quickstart.build(collator, processing_class)
        reasons = profile.check(trainer, {"data_collator": collator})
        assert len(reasons) == 1, reasons
        assert "DataCollatorWithPadding of a tokenizer that is not the Trainer's" in reasons[0]


@ML_IN_PROCESS
def test_the_collator_is_recorded_in_the_identity_and_a_changed_one_is_named(quickstart):
    from transformers import DataCollatorWithPadding, default_data_collator

    tokenizer = quickstart.tokenizer
    default = identities.compute(quickstart.build(None))
    # the Trainer's own choice and the same collator given explicitly are one training
    assert identities.compute(quickstart.build(DataCollatorWithPadding(tokenizer))) == default
    assert "pad_to_multiple_of=None" in default["data_collator"]
    padded = identities.compute(quickstart.build(DataCollatorWithPadding(tokenizer, True, None, 8)))
    assert "pad_to_multiple_of=8" in padded["data_collator"]
    assert [line.split(" differs")[0] for line in identities.differences(default, padded)] == [
        identities.LABELS["data_collator"]
    ]
    function = identities.compute(quickstart.build(default_data_collator))
    assert function["data_collator"] == "transformers.data.data_collator.default_data_collator"


# A world over machines: (world, on this machine, global rank, the runner's node or None) ->
# words of the refusal, or None where it is admitted.
_ACROSS_MACHINES = [
    ((2, 2, 1, None), None),  # one machine: the processes extension
    ((2, 1, 0, None), "outside a multi-node stage"),  # a hand-made torchrun over machines
    ((2, 1, 0, protocol.NodePlace(rank=0, nodes=1)), "outside a multi-node stage"),
    ((2, 1, 0, protocol.NodePlace(rank=0, nodes=2)), None),  # node 0 holds rank 0
    ((2, 1, 1, protocol.NodePlace(rank=1, nodes=2)), None),
    ((2, 1, 1, protocol.NodePlace(rank=0, nodes=2)), "rank 1 runs on node 0"),
    ((4, 2, 0, protocol.NodePlace(rank=0, nodes=2)), "one process per node"),
    ((4, 1, 0, protocol.NodePlace(rank=0, nodes=2)), "one process per node"),
    ((2, 2, 0, protocol.NodePlace(rank=0, nodes=2)), "one process per node"),  # a world per node
]


@pytest.mark.parametrize(("world", "refused"), _ACROSS_MACHINES)
def test_a_world_over_machines_is_admitted_on_a_multi_node_stage_one_process_per_node(
    world, refused
):
    reasons = profile.across_machines(*world)
    if refused is None:
        assert reasons == []
    else:
        (reason,) = reasons
        assert refused in reason and "not supported yet" in reason


def test_the_runner_tells_the_integration_its_node_in_the_settings():
    settings = protocol.Settings(
        integration="hf-trainer-v1",
        save_every=3,
        save_each_epoch=True,
        restored_step=None,
        node=protocol.NodePlace(rank=1, nodes=2),
    )
    assert protocol.Settings.from_dict(settings.to_dict()) == settings
    alone = dataclasses.replace(settings, node=None)
    assert "node" not in alone.to_dict()
    assert protocol.Settings.from_dict(alone.to_dict()).node is None
