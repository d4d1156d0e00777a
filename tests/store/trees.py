"""Small helpers to lay out folders and read them back, for store tests."""

from __future__ import annotations

import os
from pathlib import Path


def write_tree(root: Path, files: dict[str, bytes | str]) -> None:
    """Create ``files`` (relative path -> contents) under ``root``."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)


def read_tree(root: Path) -> dict[str, bytes | str]:
    """Every file under ``root`` as relative path -> bytes; symlinks as ``"-> target"``."""
    out: dict[str, bytes | str] = {}
    for folder, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            out[rel] = (
                f"-> {os.readlink(full)}" if os.path.islink(full) else Path(full).read_bytes()
            )
    return out
