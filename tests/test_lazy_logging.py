"""nodus's loggers (nodus._logging): a message reaches logging as from ``logging.getLogger``,
and an info message in a process that never imported logging imports nothing."""

from __future__ import annotations

import logging
import subprocess
import sys

from nodus._logging import Logger


def test_messages_reach_the_named_logger(caplog):
    log = Logger("nodus.store")
    with caplog.at_level(logging.INFO, logger="nodus.store"):
        log.info("store: committed %s", "ckpt_1")
        log.warning("store: leaving out %s", "ckpt_2")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("nodus.store", logging.INFO, "store: committed ckpt_1"),
        ("nodus.store", logging.WARNING, "store: leaving out ckpt_2"),
    ]


def test_an_info_message_imports_no_logging_and_a_warning_is_said():
    probe = (
        "import sys\n"
        "from nodus._logging import Logger\n"
        "Logger('nodus.store').info('unheard %s', 1)\n"
        "print('logging' in sys.modules, flush=True)\n"
        "Logger('nodus.store').warning('heard %s', 2)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.strip() == "False"
    assert done.stderr.strip() == "heard 2"  # logging's last resort: WARNING and above
