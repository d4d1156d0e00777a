"""The shipped counter, hung after a few saves in its first attempt only.

    python hanging_counter.py SAVES --steps 40 --save-every 10 ...

Everything after ``SAVES`` goes to ``nodus.testing.counter`` as it is. In attempt 1 (by
``NODUS_ATTEMPT``), once it has published ``SAVES`` checkpoints, it stops making progress: no
output, no write, a sleep that never ends (as a deadlocked collective or a stuck data loader
would). Every later attempt is the counter itself, so the run ends with its result.
"""

from __future__ import annotations

import os
import sys
import time

from nodus import protocol
from nodus.testing import counter


def main() -> int:
    hang_after, args = int(sys.argv[1]), sys.argv[2:]
    if os.environ.get(protocol.ENV_ATTEMPT) != "1":
        return counter.main(args)
    saved = []
    publish = counter.save

    def save(*given, **named) -> None:
        publish(*given, **named)
        saved.append(True)
        if len(saved) >= hang_after:
            print(f"counter: hanging after {len(saved)} saves", flush=True)
            while True:
                time.sleep(3600)

    counter.save = save
    return counter.main(args)


if __name__ == "__main__":
    sys.exit(main())
