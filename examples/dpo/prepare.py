"""Build what the dpo example trains on: a tiny base model and preference pairs, both local.

    python examples/dpo/prepare.py     # writes base/ and data/train.jsonl next to this file

The dataset is JSONL with ``prompt``, ``chosen`` and ``rejected``: the right sum is preferred
over a wrong one.
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
        for a in range(6):
            for b in range(6):
                row = {
                    "prompt": f"{a} + {b} =",
                    "chosen": f" {a + b}.",
                    "rejected": f" {a + b + 1}.",
                }
                handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
