"""The program ``nodus qualify --extension NAME`` trains: the quick-start, widened by one extension.

It runs from a working copy holding the quick-start program as ``train.py`` (and ``train.txt``)
and builds on its tokenizer, data and model, changed only where the extension under
qualification needs it (the ``QUALIFY_*`` settings of :mod:`nodus.stages.hf.extensions`):

- ``QUALIFY_PRECISION=bf16`` (``fp16``): ``bf16=True`` (``fp16=True``) autocast, given to
  ``TrainingArguments`` itself: its ``__post_init__`` sets Accelerate's mixed precision, without
  which an accelerator trains in float32 (the Trainer's own autocast is the CPU's only), and
  ``use_cpu=True`` where there is no accelerator;
- ``QUALIFY_WORKERS=N``: ``dataloader_num_workers=N`` (``QUALIFY_PERSISTENT=1``: persistent);
- ``QUALIFY_COLLATOR=mlm``: a tiny BERT masked LM on the same lines, its tokenizer (one token
  per character) with the special tokens masking needs, and
  ``DataCollatorForLanguageModeling(tokenizer)`` padding each batch and masking 15% of the tokens
  at random (the lines are cut to lengths from 12 to 32 characters, so batches pad);
- ``QUALIFY_PEFT=1``: a LoRA adapter on the model (``get_peft_model``);
- ``QUALIFY_TRL=sft`` (``dpo``): TRL's ``SFTTrainer`` on ``train.txt``'s lines as a ``text``
  column (``DPOTrainer`` on preference rows cut from them) instead of the Trainer, with the
  quick-start's arguments as an ``SFTConfig`` (``DPOConfig``) and TRL's own collator, as
  ``trl sft`` (``trl dpo``) builds it; DPO's reference model is a copy of the initial model;
- several processes: the program is the same; ``nodus qualify`` launches it under ``torchrun``.

Like the quick-start it saves nothing itself but the final model in ``out/model``.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.getcwd())
import train
from transformers import Trainer, default_data_collator, set_seed


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
    if os.environ.get("QUALIFY_COLLATOR") == "mlm":
        from transformers import DataCollatorForLanguageModeling

        tokenizer = masking_tokenizer()
        set_seed(args.seed)
        model = masked_lm(tokenizer)
        data = masking_dataset(tokenizer)
        collator: Callable[[list[Any]], dict[str, Any]] = DataCollatorForLanguageModeling(tokenizer)
    else:
        tokenizer = train.build_tokenizer()
        set_seed(args.seed)
        model = train.build_model(tokenizer)
        data = train.build_dataset(tokenizer)
        collator = default_data_collator
    if os.environ.get("QUALIFY_PEFT") == "1":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"]))
    method = os.environ.get("QUALIFY_TRL")
    if method:
        trainer = trl_trainer(method, model, args, tokenizer)
    else:
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            data_collator=collator,
        )
    trainer.train()
    trainer.save_model("out/model")
    leave_the_process_group()


def leave_the_process_group() -> None:
    """A rank of a world of several processes leaves without tearing its process group down.

    With torch 2.13's gloo on the CPU, the teardown at the interpreter's exit goes wrong in about
    one run in ten on a busy machine, after training and saving are done: a rank aborts
    ("terminate called without an active exception": a gloo thread still joinable when the
    process exits), or deadlocks (the group's destructor joins its worker thread while holding
    the GIL, and that thread waits for the GIL to release a tensor of its last collective). The
    launcher then fails the whole world. Everything this program writes is written by now.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def trl_trainer(method: str, model: Any, args: Any, tokenizer: Any) -> Any:
    """TRL's SFTTrainer or DPOTrainer on ``train.txt``, with the quick-start's arguments."""
    from datasets import Dataset

    with open(os.path.join(os.getcwd(), "train.txt"), encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init}
    # TRL's configs default to bf16 autocast; the quick-start trains in float32
    given.update(bf16=False, max_length=train.SEQ_LEN)
    if method == "sft":
        from trl import SFTConfig, SFTTrainer

        data = Dataset.from_dict({"text": lines})
        return SFTTrainer(
            model=model, args=SFTConfig(**given), train_dataset=data, processing_class=tokenizer
        )
    from trl import DPOConfig, DPOTrainer

    rows = {
        "prompt": [line[:12] for line in lines],
        "chosen": [line[12:24] for line in lines],
        "rejected": [line[24:36] for line in lines],
    }
    return DPOTrainer(
        model=model,
        ref_model=copy.deepcopy(model),  # a model built from a config has no name to load
        args=DPOConfig(**given),
        train_dataset=Dataset.from_dict(rows),
        processing_class=tokenizer,
    )


def masking_tokenizer():
    """The quick-start's one token per character, with ``[MASK]`` and the other specials."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials)}
    vocab.update({ch: i + len(specials) for i, ch in enumerate(train.ALPHABET)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def masking_dataset(tokenizer):
    """``train.txt``'s lines cut to 12 to 32 characters, tokenized unpadded (the collator pads
    each batch and makes the labels)."""
    from datasets import Dataset

    with open(os.path.join(os.getcwd(), "train.txt"), encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    texts = [line[: 12 + (i * 7) % 21] for i, line in enumerate(lines)]
    max_length = train.SEQ_LEN  # a value: `datasets` hashes what the function refers to

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, max_length=max_length)

    return Dataset.from_dict({"text": texts}).map(tokenize, batched=True, remove_columns=["text"])


def masked_lm(tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    return BertForMaskedLM(config)


if __name__ == "__main__":
    main()
