"""Naming models: model names, aliases and the reference grammar ``NAME[:VERSION|@ALIAS]``.

A model is named by its run's name unless ``--model`` says otherwise, so a model name follows
the workload-name grammar (``nodus.store.keys.MODEL_NAME_PATTERN``, also a safe key segment).
An alias starts with a letter, so it can never be read as a version number. Parsing is pure:
whoever resolves a reference (:class:`nodus.registry.Registry`) looks the parts up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodus.errors import UsageError
from nodus.store.keys import MODEL_NAME_PATTERN

__all__ = [
    "ModelRef",
    "check_alias",
    "check_name",
    "parse_exact",
    "parse_model_ref",
    "parse_version",
]

_NAME = re.compile(rf"^{MODEL_NAME_PATTERN}$")
_ALIAS = re.compile(r"^[a-z][a-z0-9._-]*$")
_MAX_CHARS = 100
_FORMS = "NAME (the newest version), NAME:VERSION or NAME@ALIAS"


@dataclass(frozen=True)
class ModelRef:
    """A parsed reference: a name, and at most one of a version or an alias."""

    text: str
    name: str
    version: int | None = None
    alias: str | None = None


def check_name(name: str, what: str = "model name") -> str:
    if len(name) > _MAX_CHARS or not _NAME.match(name):
        raise UsageError(
            f"{what} {name!r}: use lowercase letters, digits, '.', '_' and '-', starting with "
            f"a letter or digit (at most {_MAX_CHARS} characters)"
        )
    return name


def check_alias(alias: str) -> str:
    if len(alias) > _MAX_CHARS or not _ALIAS.match(alias):
        raise UsageError(
            f"alias {alias!r}: use lowercase letters, digits, '.', '_' and '-', starting with "
            "a letter (so it is never taken for a version number)"
        )
    return alias


def parse_version(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"version {text!r}: versions are whole numbers from 1")
    return int(text)


def parse_model_ref(text: str) -> ModelRef:
    """``NAME``, ``NAME:VERSION`` or ``NAME@ALIAS``; UsageError (exit 2) for anything else."""
    name, colon, version = text.partition(":")
    if colon:
        return ModelRef(text, _named(name, text), version=_version_in(version, text))
    name, at, alias = text.partition("@")
    if at:
        return ModelRef(text, _named(name, text), alias=check_alias(alias))
    return ModelRef(text, _named(name, text))


def parse_exact(text: str) -> ModelRef:
    """``NAME:VERSION`` only: what deleting a version takes, so nothing moves under it."""
    ref = parse_model_ref(text)
    if ref.version is None:
        raise UsageError(f"{text!r}: name the exact version to delete, as NAME:VERSION")
    return ref


def _named(name: str, text: str) -> str:
    if not name:
        raise UsageError(f"model reference {text!r}: give {_FORMS}")
    return check_name(name)


def _version_in(version: str, text: str) -> int:
    if not version.isdigit() or int(version) < 1:
        raise UsageError(
            f"model reference {text!r}: the version after ':' is a whole number from 1 "
            f"(give {_FORMS})"
        )
    return int(version)
