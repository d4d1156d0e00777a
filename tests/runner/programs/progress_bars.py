"""A program that draws progress bars as tqdm does off a terminal: each frame after a carriage
return, a nested bar's cursor-up escape, a coloured word; then it waits for the file named by
its first argument (the test's gate) and says it is done.

``RAW`` is every byte it writes before the gate, ``SHOWN`` the lines a terminal leaves of them.
"""

from __future__ import annotations

import os
import sys
import time

BAR = "".join(f"\r{i:3d}%|{'#' * (i // 10):<10}| {i}/100" for i in range(1, 101))
RAW = (
    "loading\n"
    f"{BAR}\n"
    "\x1b[A\x1b[2K\rnested 1/2\n\x1b[A\rnested 2/2\n"
    "\x1b[32mgreen\x1b[0m text\n\nafter a blank\n"
)
SHOWN = [
    "loading",
    "100%|##########| 100/100",
    "nested 1/2",
    "nested 2/2",
    "green text",
    "",
    "after a blank",
]

if __name__ == "__main__":
    sys.stdout.write(RAW)
    sys.stdout.flush()
    while not os.path.exists(sys.argv[1]):  # the test's gate: it lets the program end
        time.sleep(0.02)
    print("done", flush=True)
