"""Quick-start: a plain Transformers ``Trainer`` program with no nodus code in it.

It is written the way the Transformers examples are: a local text file loaded with
``load_dataset("text")``, tokenized with ``map``, and the library's ``default_data_collator``
passed explicitly. Everything is built locally (no hub): a character-level tokenizer and a tiny
GPT-2 from a config; it trains for a few epochs with a fixed seed and saves the final model.
Under nodus (``integration = "hf-trainer-v1"``) the same file gets periodic saves, automatic
resume and identity checks without a single change.

The ``QUICKSTART_*`` environment variables exist for nodus's own tests and for ``nodus qualify``
(shorter runs, a changed dataset or model, the machine's default device instead of the CPU); the
defaults are the demo. ``nodus qualify`` trains this very program: the package ships it as
``nodus/stages/hf/qualify_program.py`` (and ``train.txt`` as ``qualify_data.txt``), byte-for-byte
copies that a test keeps identical (``make quickstart-program`` copies them again after an edit).
"""

from __future__ import annotations

import os

from datasets import Dataset, load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

ALPHABET = "abcdefghijklmnopqrstuvwxyz .,"
SEQ_LEN = 32


def setting(name: str, default: int) -> int:
    return int(os.environ.get(f"QUICKSTART_{name}", default))


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character: tiny, deterministic and saved with every checkpoint."""
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2}
    vocab.update({ch: i + 3 for i, ch in enumerate(ALPHABET)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>"
    )


def build_dataset(tokenizer: PreTrainedTokenizerFast) -> Dataset:
    """``train.txt`` next to this file, one example per line, tokenized to a fixed length with
    ``map`` (labels equal the inputs: causal LM), the way the Transformers examples load a local
    text file."""
    data_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.txt")
    raw = load_dataset("text", data_files={"train": data_file})["train"]
    if "QUICKSTART_EXAMPLES" in os.environ:  # a smaller dataset, for nodus's own tests
        raw = raw.select(range(setting("EXAMPLES", len(raw))))

    def tokenize(batch):
        encoded = tokenizer(
            batch["text"], truncation=True, max_length=SEQ_LEN, padding="max_length"
        )
        encoded["labels"] = [list(ids) for ids in encoded["input_ids"]]
        return encoded

    return raw.map(tokenize, batched=True, remove_columns=["text"])


def build_model(tokenizer: PreTrainedTokenizerFast) -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=64,
        n_embd=32,
        n_layer=setting("LAYERS", 2),
        n_head=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    return GPT2LMHeadModel(config)


def training_arguments() -> TrainingArguments:
    return TrainingArguments(
        output_dir="out/trainer",
        num_train_epochs=setting("EPOCHS", 4),
        max_steps=setting("MAX_STEPS", -1),
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        warmup_steps=4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=setting("SEED", 42),
        use_cpu=bool(setting("USE_CPU", 1)),
        full_determinism=bool(setting("FULL_DETERMINISM", 0)),
        disable_tqdm=True,
    )


def main() -> None:
    args = training_arguments()
    tokenizer = build_tokenizer()
    # Built after the Trainer's seed is fixed, so the initial weights are the same every run.
    from transformers import set_seed

    set_seed(args.seed)
    model = build_model(tokenizer)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=build_dataset(tokenizer),
        processing_class=tokenizer,
        data_collator=default_data_collator,  # as the Transformers examples pass it
    )
    trainer.train()
    trainer.save_model("out/model")


if __name__ == "__main__":
    main()
