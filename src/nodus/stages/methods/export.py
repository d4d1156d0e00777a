"""The export stage of a framework shortcut: the trained model into the workload's outputs.

Runs as ``python -m nodus.stages.methods.export DEST`` with the train stage's ``trained/`` laid
over its copy. Full weights are copied as they are; a LoRA adapter is merged into the base model
(``AutoModelForCausalLM.from_pretrained(DEST)`` loads and generates), and the adapter itself is
kept in ``DEST/adapter`` (``PeftModel.from_pretrained(base, DEST/adapter)``). The tokenizer goes
with both.
"""

from __future__ import annotations

import os
import shutil
import sys

from nodus import protocol
from nodus.stages.methods import settings as method_settings

ADAPTER_DIR = "adapter"
TOKENIZER_CONFIG = "tokenizer_config.json"


def main(destination: str) -> None:
    settings = method_settings.read()
    trained = protocol.METHOD_TRAINED_DIR
    if os.path.exists(destination):
        shutil.rmtree(destination)
    if not os.path.isfile(os.path.join(trained, "adapter_config.json")):
        shutil.copytree(trained, destination)
        return
    merge(settings["base_model"], trained, destination)
    shutil.copytree(trained, os.path.join(destination, ADAPTER_DIR))


def merge(base_model: str, adapter: str, destination: str) -> None:
    """The adapter folder merged into the base model, with the tokenizer, into ``destination``.

    Also what ``nodus snapshots download --artifact model`` gives for a LoRA checkpoint. The
    tokenizer is the one saved with the adapter (training may have set its padding token),
    else the base model's.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    merged.save_pretrained(destination)
    saved_with = os.path.isfile(os.path.join(adapter, TOKENIZER_CONFIG))
    AutoTokenizer.from_pretrained(adapter if saved_with else base_model).save_pretrained(
        destination
    )


if __name__ == "__main__":
    main(sys.argv[1])
