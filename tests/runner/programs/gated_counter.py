"""The shipped counter, slowed by its ``--sleep`` only until a gate file exists.

    python gated_counter.py GATE --steps 2000 --save-every 5 --sleep 0.01 ...

Everything after ``GATE`` goes to ``nodus.testing.counter`` as it is, so the run, its saves and
its result are the counter's. A test that needs the program slow while it kills it creates
``GATE`` once its kills are done: the steps left then run without sleeping, instead of the test
waiting for them.
"""

from __future__ import annotations

import os
import sys
import time

from nodus.testing import counter


def main() -> int:
    gate, args = sys.argv[1], sys.argv[2:]
    slow = time.sleep

    def sleep(seconds: float) -> None:
        if not os.path.exists(gate):
            slow(seconds)

    time.sleep = sleep  # in this process the only sleeper is the counter, between steps
    return counter.main(args)


if __name__ == "__main__":
    sys.exit(main())
