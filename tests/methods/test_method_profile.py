"""The method profile is nodus's own program's: a program of a user's that asks for it (by
setting ``NODUS_METHOD``) is refused by it, however faithfully it builds TRL's trainer."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
from methods_helpers import Example

from nodus import protocol
from nodus.schemas.loader import resolve_file
from nodus.stages.hf.inprocess import method_profile
from nodus.stages.methods.train import build_trainer
from scheduling import ML_IN_PROCESS

pytestmark = [pytest.mark.hf, ML_IN_PROCESS]

OWN_PROGRAM = "the method profile is for nodus's own program (nodus.stages.methods.train)"


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> dict:
    """examples/sft's resolved ``[method]`` settings, as the train stage reads them."""
    example = Example(tmp_path_factory.mktemp("profile"), "sft")
    return resolve_file(example.file).method


@pytest.fixture
def asking(settings, monkeypatch):
    """This process (pytest: a program of the user's) with the method's settings in its
    environment, as a user's stage that sets ``NODUS_METHOD`` itself would be."""
    from nodus.stages.hf.inprocess import prepare  # imports torch

    monkeypatch.setenv(protocol.ENV_METHOD, json.dumps(settings))

    def check(trainer, given):
        reasons, extensions = prepare._assess(trainer, given)
        # the variable is what selects the method profile, which admits no extension (its LoRA
        # model would be the v1 profile's peft extension)
        assert extensions == {}
        assert reasons == method_profile.check(trainer, given)
        return reasons

    return check


def test_nodus_own_trainer_built_by_a_users_program_is_refused(settings, asking):
    trainer = build_trainer(settings)  # exactly what nodus's program builds, LoRA included
    assert asking(trainer, {}) == [
        f"{OWN_PROGRAM}; a program of your own runs under the v1 profile"
    ]


def test_the_same_trainer_passes_in_nodus_own_program(settings, asking, monkeypatch):
    # The control: only the program rule refused above.
    trainer = build_trainer(settings)
    own = SimpleNamespace(__spec__=SimpleNamespace(name=protocol.METHOD_TRAIN_PROGRAM))
    monkeypatch.setitem(sys.modules, "__main__", own)
    assert asking(trainer, {}) == []


def test_a_users_plain_trainer_is_refused_by_the_method_profile(settings, asking, tmp_path):
    from transformers import Trainer, TrainingArguments

    built = build_trainer(settings)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], max_steps=2)
    trainer = Trainer(model=built.model, args=args, train_dataset=built.train_dataset)
    reasons = asking(trainer, {})
    assert reasons[0].startswith(OWN_PROGRAM)
    assert any("the method profile needs one of TRL's trainers" in r for r in reasons), reasons
