"""Qualified environments: where hf-trainer-v1 has been shown to resume bit-identically.

Two sources, either is enough: the set shipped with nodus (``qualified.json`` next to this
module: the reference set and the CPU set CI tests with), and the sets this machine qualified
itself with ``nodus qualify`` (``$NODUS_HOME/qualified.json``). Only the four framework versions
matter; a local build suffix (``+cpu``) is ignored.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from typing import Any

from nodus._atomic import write_json_atomic
from nodus.schemas import defaults

PACKAGES = ("torch", "transformers", "accelerate", "datasets")
SHIPPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qualified.json")


def current_versions() -> dict[str, str]:
    """The installed versions of the four packages ("missing" when not installed)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _same(environment: dict[str, Any], versions: dict[str, str]) -> bool:
    return all(_public(str(environment.get(n, ""))) == _public(versions[n]) for n in PACKAGES)


def home_record_path(home: str) -> str:
    return os.path.join(home, defaults.QUALIFIED_FILE)


def _environments(path: str) -> list[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            return list(json.load(handle).get("environments", []))
    except (OSError, ValueError):
        return []  # an unreadable record qualifies nothing; `nodus qualify` rewrites it


def is_qualified(versions: dict[str, str], home: str | None) -> bool:
    candidates = _environments(SHIPPED)
    if home:
        candidates += [e for e in _environments(home_record_path(home)) if e.get("passed")]
    return any(_same(environment, versions) for environment in candidates)


def describe(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {versions[name]}" for name in PACKAGES)


def unqualified_reason(versions: dict[str, str]) -> str:
    return (
        f"environment not qualified for hf-trainer-v1 ({describe(versions)}); "
        "run `nodus qualify` on this machine to qualify it"
    )


def record_result(home: str, versions: dict[str, str], passed: bool, details: dict) -> str:
    """Add (or replace) this environment's result in ``$NODUS_HOME/qualified.json``."""
    path = home_record_path(home)
    os.makedirs(home, exist_ok=True)
    kept = [e for e in _environments(path) if not _same(e, versions)]
    kept.append(
        {
            **versions,
            "passed": passed,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "details": details,
        }
    )
    write_json_atomic(path, {"environments": kept})
    return path
