"""The shipped counter as a program that never reads what nodus restored: like a script that
accepts ``--resume_from_checkpoint`` and never passes it on, it starts at step 0 every time.

    python starting_over.py GATE --steps 200 --save-every 10 --sleep 0.05 ...

Slowed by ``--sleep`` only until ``GATE`` exists (as ``gated_counter.py``).
"""

from __future__ import annotations

import os
import sys
import time

from nodus.testing import counter


def main() -> int:
    gate, args = sys.argv[1], sys.argv[2:]
    slow = time.sleep
    time.sleep = lambda seconds: None if os.path.exists(gate) else slow(seconds)
    counter.newest_checkpoint = lambda _folder: None  # the restored checkpoint is never read
    return counter.main(args)


if __name__ == "__main__":
    sys.exit(main())
