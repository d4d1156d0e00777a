"""A program slower than its hang timeout that keeps printing: it must never be ended.

    python slow_printer.py LINES INTERVAL

It publishes ``state/checkpoint-1`` (its training has started), then prints ``LINES`` lines
``INTERVAL`` seconds apart and nothing else (no write, no step report), then writes
``out/result.json`` and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time

from nodus import protocol
from nodus.testing import counter


def main() -> int:
    lines, interval = int(sys.argv[1]), float(sys.argv[2])
    state_dir = os.environ.get(protocol.ENV_CHECKPOINT_DIR, protocol.STATE_DIR)
    os.makedirs(state_dir, exist_ok=True)
    value = counter.advance(counter.SEED, 1)
    counter.save(state_dir, 1, value, keep=1)
    for line in range(lines):
        time.sleep(interval)
        print(f"slow: still working ({line + 1} of {lines})", flush=True)
    os.makedirs("out", exist_ok=True)
    with open(os.path.join("out", "result.json"), "w") as handle:
        json.dump({"lines": lines}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
