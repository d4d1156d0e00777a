"""The quick-start's model with LoRA adapters (``get_peft_model``) under the plain Trainer.

Only the adapters train; the Trainer saves (and nodus snapshots) the adapter files, not the base
model. ``LORA_R`` sets the rank (default 4), so a test can change the LoRA configuration between
a save and its resume. The base model is the quick-start's, built from the seed, so the same
seed builds it again to load the adapters onto (``PeftModel.from_pretrained``).

Run from a working copy holding the quick-start ``train.py``; saves the adapters to
``out/model``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import train
from peft import LoraConfig, get_peft_model
from transformers import Trainer, default_data_collator, set_seed


def main() -> None:
    args = train.training_arguments()
    tokenizer = train.build_tokenizer()
    set_seed(args.seed)
    base = train.build_model(tokenizer)
    rank = int(os.environ.get("LORA_R", "4"))
    model = get_peft_model(
        base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["c_attn", "c_fc"])
    )
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
