"""nodus's loggers, which import ``logging`` only when a message can reach someone.

A ``nodus run`` has no message for anyone on its way: ``logging`` (with ``traceback`` and
``textwrap`` below it) is about 8 ms of every command's start (docs/benchmarks.md, "Start-up").
Messages go to ``logging.getLogger(name)`` as they would from a logger made at import.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging


class Logger:
    """``logging.getLogger(name)``, looked up at each message (the lookup is a dict's)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def info(self, message: str, *args: object) -> None:
        # Where nothing imported logging, nothing configured it: its defaults drop a record
        # below WARNING, so this one reaches no one and need not import it.
        if "logging" in sys.modules:
            self._logger().info(message, *args)

    def warning(self, message: str, *args: object) -> None:
        self._logger().warning(message, *args)

    def _logger(self) -> logging.Logger:
        import logging

        return logging.getLogger(self.name)
