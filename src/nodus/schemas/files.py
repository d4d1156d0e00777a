"""The user's files as the loaders may open them: only regular ones (no pydantic here)."""

from __future__ import annotations

import os
import stat

__all__ = ["regular_file"]


def regular_file(path: str) -> bool:
    """Whether ``path`` is a regular file (following links): a FIFO or a device would block a
    read or never end it. True when it is missing or unreadable, which opening it reports in
    its own words."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True
