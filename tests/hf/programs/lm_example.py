"""Causal language modelling in the shape of the Transformers examples (``run_clm.py``).

Written for nodus's tests, not copied: a local data file loaded with ``load_dataset``, tokenized
with ``map(batched=True, remove_columns=...)``, grouped into blocks with a second ``map``, and a
tiny GPT-2 trained by the plain ``Trainer``. No nodus code: the runner prepares it unchanged.

Settings, from the environment:
    LM_DATA_FILE           the training data (default ``train.txt`` in the code folder); a
                           ``.txt`` file loads with the ``text`` builder, ``.json``/``.jsonl``
                           with ``json`` (a "text" field per line)
    LM_WITH_TOKENIZER=1    pass the tokenizer as ``processing_class``: the Trainer then collates
                           with ``DataCollatorWithPadding`` of that tokenizer, its default
    LM_EXPLICIT_COLLATOR=1 pass ``data_collator=default_data_collator`` as ``run_clm.py`` does
    LM_PADDING_COLLATOR=1  pass ``DataCollatorWithPadding(tokenizer)`` (with LM_WITH_TOKENIZER),
                           as the text-classification examples do
    LM_EPOCHS              training epochs (default 2)
"""

from __future__ import annotations

import os
from itertools import chain

from datasets import load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    DataCollatorWithPadding,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)

BLOCK_SIZE = 32
ALPHABET = "abcdefghijklmnopqrstuvwxyz .,"


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character, built here so nothing comes from the hub."""
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2}
    vocab.update({ch: i + 3 for i, ch in enumerate(ALPHABET)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>"
    )


def load_raw(path: str):
    builder = "text" if path.endswith(".txt") else "json"
    return load_dataset(builder, data_files={"train": path})


def prepare(raw, tokenizer: PreTrainedTokenizerFast):
    """Tokenize every line, then cut the concatenated tokens into blocks (labels = inputs)."""
    column_names = list(raw["train"].features)

    def tokenize_function(examples):
        return tokenizer(examples["text"])

    def group_texts(examples):
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total_length = len(concatenated[next(iter(examples.keys()))])
        total_length = (total_length // BLOCK_SIZE) * BLOCK_SIZE
        result = {
            k: [t[i : i + BLOCK_SIZE] for i in range(0, total_length, BLOCK_SIZE)]
            for k, t in concatenated.items()
        }
        result["labels"] = result["input_ids"].copy()
        return result

    tokenized = raw.map(
        tokenize_function, batched=True, remove_columns=column_names, desc="Tokenizing"
    )
    return tokenized.map(group_texts, batched=True, desc=f"Grouping texts in {BLOCK_SIZE}")


def main() -> None:
    args = TrainingArguments(
        output_dir="out/trainer",
        num_train_epochs=int(os.environ.get("LM_EPOCHS", 2)),
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        warmup_steps=4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=42,
        use_cpu=True,
        disable_tqdm=True,
    )
    tokenizer = build_tokenizer()
    lm_datasets = prepare(load_raw(os.environ.get("LM_DATA_FILE", "train.txt")), tokenizer)
    set_seed(args.seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=BLOCK_SIZE,
        n_embd=32,
        n_layer=2,
        n_head=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    extra = {}
    if os.environ.get("LM_WITH_TOKENIZER") == "1":
        extra["processing_class"] = tokenizer
    if os.environ.get("LM_EXPLICIT_COLLATOR") == "1":
        extra["data_collator"] = default_data_collator
    if os.environ.get("LM_PADDING_COLLATOR") == "1":
        extra["data_collator"] = DataCollatorWithPadding(tokenizer)
    trainer = Trainer(
        model=GPT2LMHeadModel(config), args=args, train_dataset=lm_datasets["train"], **extra
    )
    trainer.train()
    trainer.save_model("out/model")


if __name__ == "__main__":
    main()
