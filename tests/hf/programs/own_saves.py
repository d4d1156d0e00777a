"""The quick-start's Trainer with the library's own saving left on (``save_strategy="steps"``,
``save_steps`` from ``OWN_SAVE_STEPS``), as many programs written before nodus are."""

from __future__ import annotations

import dataclasses
import os

import train
from transformers import Trainer, default_data_collator, set_seed

args = dataclasses.replace(
    train.training_arguments(),
    save_strategy="steps",
    save_steps=int(os.environ["OWN_SAVE_STEPS"]),
)
tokenizer = train.build_tokenizer()
set_seed(args.seed)
trainer = Trainer(
    model=train.build_model(tokenizer),
    args=args,
    train_dataset=train.build_dataset(tokenizer),
    processing_class=tokenizer,
    data_collator=default_data_collator,
)
trainer.train()
trainer.save_model("out/model")
print("trained", flush=True)
