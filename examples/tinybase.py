"""A tiny base model and tokenizer, built locally (no hub), for the managed-method examples.

``save_base(folder)`` writes what ``[method] base_model`` names: a GPT-2 of a few thousand
parameters from a config, and a character-level tokenizer with a chat template (so sft's
``messages`` rows work too). The weights come from a fixed seed: every build is the same.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:?!+-=<>|/\n"
# One line per message: "<role>: <content>", then the answer's start for generation.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2}
    vocab.update({ch: i + 3 for i, ch in enumerate(ALPHABET)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_base(folder: str, seed: int = 0) -> None:
    """Write the tiny model and its tokenizer into ``folder`` (``from_pretrained`` loads it)."""
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
