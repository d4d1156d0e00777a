"""Qualified environments: where hf-trainer-v1 has been shown to resume bit-identically.

Two sources, either is enough: the set shipped with nodus (``qualified.json`` next to this
module: the reference set and the CPU set CI tests with), and the sets this machine qualified
itself with ``nodus qualify`` (``$NODUS_HOME/qualified.json``). Only the four framework versions
matter; a local build suffix (``+cpu``) is ignored. ``$NODUS_IGNORE_SHIPPED_QUALIFICATIONS=1``
leaves the shipped sets out: only what this machine qualified itself counts.

The v1 profile is qualified for a version set on any device. Each extension of it
(:mod:`nodus.stages.hf.extensions`) is qualified on its own, per device type, and named in the
environment's ``extensions``: a list of ``NAME@DEVICE`` in the shipped file, and in the home
record a map from ``NAME@DEVICE`` to that ``nodus qualify --extension`` result.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import time
from typing import Any

from nodus._atomic import write_json_atomic
from nodus.schemas import defaults
from nodus.stages.hf import extensions

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


def _shipped() -> list[dict[str, Any]]:
    if os.environ.get(defaults.ENV_IGNORE_SHIPPED_QUALIFICATIONS, "") not in ("", "0"):
        return []
    return _environments(SHIPPED)


def is_qualified(versions: dict[str, str], home: str | None) -> bool:
    candidates = _shipped()
    if home:
        candidates += [e for e in _environments(home_record_path(home)) if e.get("passed")]
    return any(_same(environment, versions) for environment in candidates)


def qualified_extensions(versions: dict[str, str], home: str | None) -> set[str]:
    """Every ``NAME@DEVICE`` qualified for these versions, shipped or passed on this machine."""
    found: set[str] = set()
    for environment in _shipped():
        if _same(environment, versions):
            found.update(str(k) for k in environment.get("extensions", []))
    for environment in _environments(home_record_path(home)) if home else []:
        if _same(environment, versions):
            results = environment.get("extensions", {})
            if isinstance(results, dict):
                found.update(str(k) for k, r in results.items() if _passed(r))
    return found


def _passed(result: Any) -> bool:
    return isinstance(result, dict) and result.get("passed") is True


def unqualified_extension_reasons(
    versions: dict[str, str], home: str | None, used: dict[str, str], device: str
) -> list[str]:
    """One reason for each extension ``used`` (name: what uses it) not qualified here."""
    return [
        f"{used[name]} needs the hf-trainer-v1 extension {name!r}, not qualified on {device} "
        f"with {describe(versions)}; run `{extensions.qualify_command([name])}` on this "
        "machine to qualify it"
        for name in unqualified_extensions(versions, home, used, device)
    ]


def unqualified_extensions(
    versions: dict[str, str], home: str | None, used: dict[str, str], device: str
) -> list[str]:
    """The extensions of ``used`` not qualified here on ``device``."""
    qualified = qualified_extensions(versions, home)
    return [name for name in used if extensions.key(name, device) not in qualified]


def describe(versions: dict[str, str]) -> str:
    return ", ".join(f"{name} {versions[name]}" for name in PACKAGES)


def unqualified_reason(versions: dict[str, str]) -> str:
    return (
        f"environment not qualified for hf-trainer-v1 ({describe(versions)}); "
        "run `nodus qualify` on this machine to qualify it"
    )


def record_result(
    home: str,
    versions: dict[str, str],
    passed: bool,
    details: dict,
    extension: str | None = None,
) -> str:
    """Record this environment's result in ``$NODUS_HOME/qualified.json``: the profile's
    (``extension`` None) or one extension's (``NAME@DEVICE``), replacing an earlier one and
    keeping the others."""
    path = home_record_path(home)
    os.makedirs(home, exist_ok=True)
    environments = _environments(path)
    kept = [e for e in environments if not _same(e, versions)]
    entry = next((e for e in environments if _same(e, versions)), {"passed": False})
    result = {
        "passed": passed,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "details": details,
    }
    if extension is None:
        entry = {**entry, **result}
    else:
        results = entry.get("extensions")
        earlier = results if isinstance(results, dict) else {}
        entry = {**entry, "extensions": {**earlier, extension: result}}
    kept.append({**entry, **versions})
    write_json_atomic(path, {"environments": kept})
    return path
