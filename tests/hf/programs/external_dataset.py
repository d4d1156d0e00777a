"""The quick-start program whose dataset size comes from a file outside the code folder.

A run's source and env are captured when it is accepted, so only something outside both can
change the data between two attempts: here the file named by ``QUICKSTART_DATA_FILE`` (an
absolute path) holds the number of examples. Copied next to the quick-start ``train.py``.
"""

import os
import sys

with open(os.environ["QUICKSTART_DATA_FILE"], encoding="utf-8") as handle:
    os.environ["QUICKSTART_EXAMPLES"] = handle.read().strip()

sys.path.insert(0, os.getcwd())
import train

train.main()
