"""The cache of remembered resolutions stays bounded: it keeps the entries used most recently."""

from __future__ import annotations

import time

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
        time.sleep(0.05)  # the next use lands on a later modification time
        return entries() - before

    (first,) = resolve(files[0])
    (second,) = resolve(files[1])
    assert resolve(files[0]) == set()  # remembered: used, not written again
    (third,) = resolve(files[2])  # a third entry: the least recently used one goes
    assert entries() == {first, third}
    assert resolve(files[1]) == {second}  # resolved afresh, and remembered again
