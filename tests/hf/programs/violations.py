"""Builds one Trainer per v1 profile violation, each a small change to the quick-start program.

Run under nodus's bootstrap from a working copy holding the quick-start ``train.py``. For every
violation it prints ``VIOLATION <name> refused`` (explicit hf-trainer-v1 ended the attempt at
construction) or ``VIOLATION <name> trained`` (auto ran it unprepared). A real program would end
at the first refusal; this one catches it so one process can show them all.
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.getcwd())
import train
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorWithPadding,
    Trainer,
    default_data_collator,
    set_seed,
)


class CustomTrainer(Trainer):
    pass


def own_collator(features):
    return default_data_collator(features)


COLLATORS = {  # each one trains as the library's defaults would, yet is not one of them
    "collator_lm": lambda tokenizer: DataCollatorForLanguageModeling(tokenizer, mlm=False),
    "collator_function": lambda tokenizer: own_collator,
    "collator_other_tokenizer": lambda tokenizer: DataCollatorWithPadding(train.build_tokenizer()),
}


def build(name):
    args = train.training_arguments()
    changes = {
        "fp16": {"fp16": True},
        "workers": {"dataloader_num_workers": 2},
        "save_only_model": {"save_only_model": True},
        "load_best": {
            "load_best_model_at_end": True,
            "eval_strategy": "steps",
            "save_strategy": "steps",
            "save_steps": 50,
            "eval_steps": 50,
        },
    }
    if name in changes:
        args = dataclasses.replace(args, **changes[name])
    tokenizer = train.build_tokenizer()
    set_seed(args.seed)
    model = train.build_model(tokenizer)
    data = train.build_dataset(tokenizer)
    extra = {}
    if name == "iterable":
        data = data.to_iterable_dataset()
    if name == "peft":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True)
        )
    if name == "load_best":
        extra["eval_dataset"] = data
    if name in COLLATORS:
        extra["data_collator"] = COLLATORS[name](tokenizer)
    cls = CustomTrainer if name == "subclass" else Trainer
    return cls(model=model, args=args, train_dataset=data, processing_class=tokenizer, **extra)


for name in os.environ["VIOLATIONS"].split(","):
    try:
        trainer = build(name)
    except SystemExit as stop:
        print(f"VIOLATION {name} refused {stop.code}", flush=True)
        continue
    trainer.train()
    print(f"VIOLATION {name} trained", flush=True)
