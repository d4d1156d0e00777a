"""The quick-start trained in mixed precision on the CPU, as a user asks for it.

``PRECISION=bf16``: ``TrainingArguments(bf16=True, use_cpu=True)``, bfloat16 autocast around a
float32 model (the Trainer's ``cpu_amp``). ``PRECISION=bf16-model``: the model itself stored in
bfloat16 (``model.to(torch.bfloat16)``), trained without autocast. ``PRECISION=fp16``:
``fp16=True``, which the library accepts on the CPU and trains in float32 (nodus refuses it).

Run from a working copy holding the quick-start ``train.py``; saves the model to ``out/model``.
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
import train
from transformers import Trainer, default_data_collator, set_seed


def main() -> None:
    precision = os.environ["PRECISION"]
    args = train.training_arguments()
    if precision in ("bf16", "fp16"):
        # the flag given to TrainingArguments itself, as a user's program (or HfArgumentParser
        # with --bf16) gives it: its __post_init__ sets Accelerate's mixed precision too
        args = dataclasses.replace(args, **{precision: True})
    tokenizer = train.build_tokenizer()
    set_seed(args.seed)
    model = train.build_model(tokenizer)
    if precision == "bf16-model":
        model = model.to(torch.bfloat16)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train.build_dataset(tokenizer),
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )
    trainer.train()
    trainer.save_model("out/model")


if __name__ == "__main__":
    main()
