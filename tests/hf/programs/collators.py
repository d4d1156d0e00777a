"""The quick-start with its collator passed explicitly, the way the Transformers examples do.

``COLLATOR=default``: the quick-start's fixed-length causal-LM data and model, with
``data_collator=default_data_collator`` (``run_clm.py``'s choice).

``COLLATOR=padding``: records of varying length, as a JSON Lines file would hold them, classified
by a tiny GPT-2, with ``data_collator=DataCollatorWithPadding(tokenizer)`` padding each batch to
its longest example (``run_glue.py``'s choice without ``--pad_to_max_length``).

Run from a working copy holding the quick-start ``train.py``; saves the model to ``out/model``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import train
from datasets import Dataset
from transformers import (
    DataCollatorWithPadding,
    GPT2Config,
    GPT2ForSequenceClassification,
    Trainer,
    default_data_collator,
    set_seed,
)


def padded_records(tokenizer):
    """96 sentences of 3 to 10 words, labelled by whether the fox is in them."""
    words = [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "a",
        "lazy",
        "dog",
        "while",
        "nodus",
        "keeps",
        "every",
        "step",
        "safe",
    ]
    records = [
        {
            "text": " ".join(words[(i * 5 + k * 7) % len(words)] for k in range(3 + i % 8)),
            "label": 0,
        }
        for i in range(96)
    ]
    for record in records:
        record["label"] = int("fox" in record["text"].split())

    # A value, not the module: `datasets` hashes what the function refers to, and a module's
    # state holds its file's path, which differs from one working copy to the next.
    max_length = train.SEQ_LEN

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, max_length=max_length)

    data = Dataset.from_list(records)
    return data.map(tokenize, batched=True, remove_columns=["text"])


def classifier(tokenizer):
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    return GPT2ForSequenceClassification(config)


def main() -> None:
    args = train.training_arguments()
    tokenizer = train.build_tokenizer()
    set_seed(args.seed)
    if os.environ["COLLATOR"] == "padding":
        model, data = classifier(tokenizer), padded_records(tokenizer)
        collator = DataCollatorWithPadding(tokenizer)
    else:
        model, data = train.build_model(tokenizer), train.build_dataset(tokenizer)
        collator = default_data_collator
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


if __name__ == "__main__":
    main()
