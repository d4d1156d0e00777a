"""Build what the sft example trains on: a tiny base model and a small dataset, both local.

    python examples/sft/prepare.py     # writes base/ and data/train.jsonl next to this file

The dataset is JSONL with a ``text`` column (sft also reads ``messages`` or
``prompt``/``completion``): short sums the tiny model learns to complete.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # examples/tinybase.py

from tinybase import save_base  # noqa: E402


def main() -> None:
    save_base(os.path.join(HERE, "base"))
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    with open(os.path.join(HERE, "data", "train.jsonl"), "w", encoding="utf-8") as handle:
        for a in range(8):
            for b in range(8):
                handle.write(json.dumps({"text": f"{a} + {b} = {a + b}."}) + "\n")


if __name__ == "__main__":
    main()
