"""The program ``nodus qualify --extension NAME`` trains: the quick-start, widened by one extension.

It runs from a working copy holding the quick-start program as ``train.py`` (and ``train.txt``)
and builds on its tokenizer, data and model, changed only where the extension under
qualification needs it (the ``QUALIFY_*`` settings of :mod:`nodus.stages.hf.extensions`):

- ``QUALIFY_PRECISION=bf16`` (``fp16``): ``bf16=True`` (``fp16=True``) autocast, given to
  ``TrainingArguments`` itself: its ``__post_init__`` sets Accelerate's mixed precision, without
  which an accelerator trains in float32 (the Trainer's own autocast is the CPU's only), and
  ``use_cpu=True`` where there is no accelerator;
- ``QUALIFY_WORKERS=N``: ``dataloader_num_workers=N`` (``QUALIFY_PERSISTENT=1``: persistent);
- ``QUALIFY_COLLATOR=mlm``: ``DataCollatorForLanguageModeling`` masking at random;
- ``QUALIFY_PEFT=1``: a LoRA adapter on the model (``get_peft_model``);
- several processes: the program is the same; ``nodus qualify`` launches it under ``torchrun``.

Like the quick-start it saves nothing itself but the final model in ``out/model``.
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.getcwd())
import train  # noqa: E402  (the quick-start program in the working copy)
from transformers import Trainer, default_data_collator, set_seed  # noqa: E402


def main() -> None:
    args = train.training_arguments()
    precision = os.environ.get("QUALIFY_PRECISION")
    if precision in ("bf16", "fp16"):
        import torch

        # without an accelerator TrainingArguments accepts bf16 only with use_cpu=True
        cpu = args.use_cpu or not torch.cuda.is_available()
        args = dataclasses.replace(args, use_cpu=cpu, **{precision: True})
    workers = int(os.environ.get("QUALIFY_WORKERS", "0"))
    if workers:
        args.dataloader_num_workers = workers
        args.dataloader_persistent_workers = os.environ.get("QUALIFY_PERSISTENT") == "1"
    tokenizer = train.build_tokenizer()
    set_seed(args.seed)
    model = train.build_model(tokenizer)
    if os.environ.get("QUALIFY_PEFT") == "1":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"]))
    collator = default_data_collator
    if os.environ.get("QUALIFY_COLLATOR") == "mlm":
        from transformers import DataCollatorForLanguageModeling

        collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train.build_dataset(tokenizer),
        processing_class=tokenizer,
        data_collator=collator,
    )
    trainer.train()
    trainer.save_model("out/model")


if __name__ == "__main__":
    main()
