"""Issue 40 point 1: the profile admits TRL's SFTTrainer and DPOTrainer (the ``trl`` extension),
and a refusal names the ways forward that fit it.

The ways forward are a pure function, tested as a table; the rule is checked on real TRL
trainers built in this process from a tiny model.
"""

from __future__ import annotations

import pytest

from nodus.stages.hf.inprocess import profile

pytestmark = pytest.mark.hf
# The trainers' tests, on one worker: the module's `build` (TRL imported, a tiny GPT-2 saved) once.
on_build = pytest.mark.xdist_group("trl_build")

AUTO = 'integration = "auto": the program runs unprepared'
CONTRACT = "the directory contract (no integration)"
TRL_SCRIPTS = "`trl sft` and `trl dpo` ignore it and restart at step 0"


@pytest.mark.parametrize(
    ("to_qualify", "environment", "methods", "outside", "first"),
    [
        # an unqualified extension alone: qualifying it is the way; TRL's methods fit too
        (["trl"], False, ["sft"], False, "qualify this machine for it: `nodus qualify "),
        (["trl", "peft"], False, [], False, "--extension trl --extension peft`, then run again"),
        # the versions unqualified: the profile's qualification first
        ([], True, [], False, "qualify this machine for it: `nodus qualify`, then run again"),
        (["peft"], True, [], False, "`nodus qualify && nodus qualify --extension peft`"),
        # outside the profile: no qualification lifts it
        (["trl"], False, ["sft"], True, 'framework = "sft" instead of a command'),
        ([], False, ["dpo"], True, 'framework = "dpo" instead of a command'),
        ([], False, [], True, AUTO),
    ],
)
def test_ways_forward_name_only_what_fits(to_qualify, environment, methods, outside, first):
    ways = profile.ways_forward(to_qualify, environment, methods, outside)
    assert first in ways[0]
    assert ways[-2].startswith(AUTO) and "not bit-identical" in ways[-2]
    assert ways[-1].startswith(CONTRACT) and "resume_args" in ways[-1]
    assert (TRL_SCRIPTS in ways[-1]) == bool(methods)
    assert any("nodus qualify" in way for way in ways) == (
        bool(to_qualify or environment) and not outside
    )


def test_the_qualification_trains_sft_then_dpo_on_every_device():
    from nodus.qualify import Case

    for device in ("cpu", "cuda"):
        cases = [(case.program, case.env) for case in Case.all_of("trl", device)]
        assert cases == [("extension.py", {"QUALIFY_TRL": m}) for m in ("sft", "dpo")]


def test_the_shipped_cpu_set_lists_trl():
    from nodus.stages.hf import qualification

    versions = {"torch": "2.13.0", "transformers": "4.57.6", "accelerate": "1.12.0"}
    found = qualification.qualified_extensions({**versions, "datasets": "4.4.2"}, None)
    assert "trl@cpu" in found and "trl@cuda" not in found


# --- the rule, on real TRL trainers -----------------------------------------------------------


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(kind, method)``: a TRL trainer of ``kind`` for ``method`` on a tiny GPT-2."""
    import sys

    from datasets import Dataset
    from hf_helpers import REPO

    sys.path.insert(0, str(REPO / "examples"))
    try:
        from tinybase import build_tokenizer, save_base
    finally:
        sys.path.remove(str(REPO / "examples"))
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, SFTConfig

    base = tmp_path_factory.mktemp("trl-base")
    save_base(str(base))
    tokenizer = build_tokenizer()
    out = str(tmp_path_factory.mktemp("trl-out"))
    rows = {
        "sft": {"text": ["1 + 1 = 2.", "2 + 2 = 4."]},
        "dpo": {"prompt": ["1 + 1 ="] * 2, "chosen": [" 2."] * 2, "rejected": [" 3."] * 2},
    }
    configs = {"sft": SFTConfig, "dpo": DPOConfig}

    def make(kind, method, edited=False, **config):
        args = configs[method](output_dir=out, bf16=False, use_cpu=True, report_to=[], **config)
        data = {k: [v[0] + ("!" if edited else ""), *v[1:]] for k, v in rows[method].items()}
        return kind(
            model=AutoModelForCausalLM.from_pretrained(str(base)),
            args=args,
            train_dataset=Dataset.from_dict(data),
            processing_class=tokenizer,
        )

    return make


@pytest.mark.slow
@on_build
@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_trl_trainers_with_their_collators_are_the_trl_extension(build, method):
    from trl import DPOTrainer, SFTTrainer

    kind = {"sft": SFTTrainer, "dpo": DPOTrainer}[method]
    trainer = build(kind, method)
    found = profile.assess(trainer, {"data_collator": trainer.data_collator})
    assert found.reasons == []
    collator = type(trainer.data_collator).__name__
    assert found.extensions == {"trl": f"TRL's {collator}, TRL's {kind.__name__}"}
    assert profile.trl_methods(kind) == [method]


@pytest.mark.slow
@on_build
def test_a_subclass_of_a_trl_trainer_is_refused_naming_it_and_its_collator(build):
    from trl import SFTTrainer

    class MyTrainer(SFTTrainer):
        pass

    trainer = build(MyTrainer, "sft")
    found = profile.assess(trainer, {"data_collator": trainer.data_collator})
    assert found.extensions == {}
    collator, subclass = found.reasons
    assert "Trainer subclass" in subclass and "MyTrainer" in subclass
    assert "exactly TRL's SFTTrainer or DPOTrainer (the 'trl' extension)" in subclass
    # TRL's collator is named with its module: it is not Transformers' namesake
    assert "DataCollatorForLanguageModeling) of trl.trainer.sft_trainer" in collator
    assert profile.trl_methods(MyTrainer) == ["sft"]


@pytest.mark.slow
@on_build
@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_the_dataset_identity_is_the_data_trl_tokenized(build, method):
    """TRL tokenizes the rows it is given (``map``): the identity is that content, so the same
    rows read the same and one changed character reads otherwise."""
    from trl import DPOTrainer, SFTTrainer

    from nodus.stages.hf.inprocess import identity

    kind = {"sft": SFTTrainer, "dpo": DPOTrainer}[method]
    same, again, edited = (
        identity.compute(build(kind, method, edited)) for edited in (False, False, True)
    )
    tokenized = {"sft": "input_ids", "dpo": "prompt_ids"}[method]
    assert tokenized in build(kind, method).train_dataset.column_names  # what TRL trains on
    assert same["dataset"] == again["dataset"] and same["dataset"].endswith("(2 rows)")
    assert identity.differences(same, again) == []
    (changed,) = identity.differences(same, edited)
    assert changed.startswith("train dataset content differs")


@pytest.mark.slow
@on_build
def test_dpo_updating_its_reference_model_is_refused(build):
    """``sync_ref_model=True`` trains the reference model too, and no checkpoint holds it."""
    from trl import DPOTrainer

    trainer = build(DPOTrainer, "dpo", sync_ref_model=True)
    found = profile.assess(trainer, {"data_collator": trainer.data_collator})
    # (assessed after the build, TRL's callback that syncs it counts as a custom one too)
    assert any(r.startswith("sync_ref_model=True: not supported yet") for r in found.reasons)
