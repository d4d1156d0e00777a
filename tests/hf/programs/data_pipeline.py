"""The quick-start's data through the library's batch builders, as real programs feed them.

``PIPELINE`` picks the model and collator (every model tiny, built from a config; no hub):

- ``mlm``: a BERT masked LM, ``DataCollatorForLanguageModeling(tokenizer)`` masking 15% of the
  tokens at random (``run_mlm.py``'s choice);
- ``wwm``: the same model, ``DataCollatorForWholeWordMask(tokenizer)``;
- ``clm``: the quick-start's GPT-2, ``DataCollatorForLanguageModeling(tokenizer, mlm=False)``
  padding each batch and deriving the labels;
- ``seq2seq``: a T5 learning to spell each line backwards,
  ``DataCollatorForSeq2Seq(tokenizer, model=model)`` padding inputs and labels;
- ``tokens``: a BERT token classifier (is the character a vowel?),
  ``DataCollatorForTokenClassification(tokenizer)``;
- ``default``: the quick-start itself (``default_data_collator``).

``WORKERS=N`` trains with N dataloader workers (``PERSISTENT=1``: persistent ones), ``GA=N``
accumulates N batches per step, ``QUICKSTART_EXAMPLES=N`` keeps the first N lines,
``MLM_PROBABILITY`` changes the masking rate, ``COLLATOR_SEED`` gives the masking collators a
generator of their own. Records vary in length (the lines are cut to 12 to 32 characters), so the
collators pad. Run from a working copy holding the quick-start
``train.py`` and ``train.txt``; saves the model to ``out/model``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
import train
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForTokenClassification,
    DataCollatorForLanguageModeling,
    DataCollatorForSeq2Seq,
    DataCollatorForTokenClassification,
    DataCollatorForWholeWordMask,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
    Trainer,
    default_data_collator,
    set_seed,
)


def masking_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character, with the special tokens a masked LM needs."""
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


def lines() -> list[str]:
    """The lines of ``train.txt``, cut to lengths from 12 to 32 characters."""
    with open(os.path.join(os.getcwd(), "train.txt"), encoding="utf-8") as handle:
        found = [line.rstrip("\n") for line in handle if line.strip()]
    found = found[: train.setting("EXAMPLES", len(found))]
    return [line[: 12 + (i * 7) % 21] for i, line in enumerate(found)]


def records(tokenizer, kind: str):
    """``train.txt`` tokenized without padding: the collator pads each batch."""
    from datasets import Dataset

    max_length = train.SEQ_LEN  # a value, not the module: `datasets` hashes what map refers to
    vowels = {tokenizer.convert_tokens_to_ids(ch) for ch in "aeiou"}

    def tokenize(batch):
        encoded = tokenizer(batch["text"], truncation=True, max_length=max_length)
        if kind == "seq2seq":
            backwards = [text[::-1] for text in batch["text"]]
            encoded["labels"] = tokenizer(backwards, truncation=True, max_length=max_length)[
                "input_ids"
            ]
        if kind == "tokens":
            encoded["labels"] = [[int(t in vowels) for t in ids] for ids in encoded["input_ids"]]
        return encoded

    data = Dataset.from_dict({"text": lines()})
    return data.map(tokenize, batched=True, remove_columns=["text"])


def bert(tokenizer, head):
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
    )
    return head(config)


def t5(tokenizer):
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=1,
        num_heads=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return T5ForConditionalGeneration(config)


def build(kind: str, args):
    """Tokenizer, model, data and collator of one pipeline (the seed is set by the caller)."""
    seed = int(os.environ["COLLATOR_SEED"]) if "COLLATOR_SEED" in os.environ else None
    probability = float(os.environ.get("MLM_PROBABILITY", "0.15"))
    if kind in ("mlm", "wwm"):
        tokenizer = masking_tokenizer()
        model = bert(tokenizer, BertForMaskedLM)
        cls = DataCollatorForLanguageModeling if kind == "mlm" else DataCollatorForWholeWordMask
        collator = cls(tokenizer, mlm_probability=probability, seed=seed)
        return tokenizer, model, records(tokenizer, kind), collator
    if kind == "tokens":
        tokenizer = masking_tokenizer()
        model = bert(tokenizer, BertForTokenClassification)
        return (
            tokenizer,
            model,
            records(tokenizer, kind),
            DataCollatorForTokenClassification(tokenizer),
        )
    tokenizer = train.build_tokenizer()
    if kind == "seq2seq":
        model = t5(tokenizer)
        collator = DataCollatorForSeq2Seq(tokenizer, model=model)
        return tokenizer, model, records(tokenizer, kind), collator
    model = train.build_model(tokenizer)
    if kind == "clm":
        collator = DataCollatorForLanguageModeling(tokenizer, mlm=False, seed=seed)
        return tokenizer, model, records(tokenizer, kind), collator
    return tokenizer, model, train.build_dataset(tokenizer), default_data_collator


def main() -> None:
    args = train.training_arguments()
    args.gradient_accumulation_steps = int(os.environ.get("GA", "1"))
    args.dataloader_num_workers = int(os.environ.get("WORKERS", "0"))
    args.dataloader_persistent_workers = os.environ.get("PERSISTENT") == "1"
    set_seed(args.seed)
    tokenizer, model, data, collator = build(os.environ.get("PIPELINE", "mlm"), args)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        data_collator=collator,
    )
    trainer.train(resume_from_checkpoint=os.environ.get("RESUME_FROM") or None)
    trainer.save_model("out/model")


if __name__ == "__main__":
    main()
