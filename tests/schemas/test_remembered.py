"""The cache of remembered resolutions stays bounded: it keeps the entries used most recently."""

from __future__ import annotations

import os

from nodus.schemas import defaults, remembered
from nodus.schemas.remembered import resolve_remembered


def test_the_cache_keeps_the_entries_used_most_recently(tmp_path, monkeypatch):
    monkeypatch.setattr(remembered, "RESOLVED_KEEP", 2)
    home = tmp_path / "home"
    cache = home / defaults.RESOLVED_DIR
    files = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        workload = tmp_path / name / "nodus.toml"
        workload.write_text(f'name = "{name}"\ncommand = ["python", "train.py"]\n')
        files.append(str(workload))

    def entries() -> set[str]:
        return {p.name for p in cache.iterdir()} if cache.exists() else set()

    def resolve(path: str) -> set[str]:
        before = entries()
        assert resolve_remembered(path, None, str(home)).stages[0].name == "main"
        # Every entry made a second older: the next use lands on a later modification time,
        # however coarse the file system's clock (the order of the uses is kept).
        for entry in cache.iterdir():
            stat = entry.stat()
            os.utime(entry, ns=(stat.st_atime_ns, stat.st_mtime_ns - 1_000_000_000))
        return entries() - before

    (first,) = resolve(files[0])
    (second,) = resolve(files[1])
    assert resolve(files[0]) == set()  # remembered: used, not written again
    (third,) = resolve(files[2])  # a third entry: the least recently used one goes
    assert entries() == {first, third}
    assert resolve(files[1]) == {second}  # resolved afresh, and remembered again
