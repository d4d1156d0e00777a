"""Pydantic's validation errors, rewritten as problems a person can act on.

Each error becomes one :class:`~nodus.errors.Problem`: the field path as it reads in the TOML file
(``stages[1].continuity.checkpoint_paths[0]``), the value found, and the rule in plain words.
Unknown keys name the nearest valid key, found by walking the models along the error's path.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from nodus.errors import Problem

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_MAX_ECHOED = 200  # characters of a key or value a message repeats

_REMOVED_KEYS = {
    "interrupt_tolerance": "not an input: interruption behaviour derives from continuity "
    "(mode and resume_on_interruption)",
}

# Rule text by pydantic error type; ``{...}`` fields come from the error's context.
_RULES = {
    "missing": "required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "enum": "must be {expected}",
    "literal_error": "must be {expected}",
    "too_long": "at most {max_length} items",
    "too_short": "must have at least {min_length} items",
    "string_too_short": "must not be empty",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "finite_number": "must be a finite number",
    "frozen_instance": "workload values cannot be changed; use model_copy(update=...)",
}


def problems_from(error: ValidationError, root: type[BaseModel]) -> list[Problem]:
    """One problem per pydantic error, in the order pydantic found them."""
    return [_problem(detail, root) for detail in error.errors()]


def field_path(loc: Sequence[Any]) -> str:
    """``("stages", 1, "env", "A B")`` → ``stages[1].env["A B"]``."""
    text = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for a dict key rather than its value
            continue
        if isinstance(part, int):
            text += f"[{part}]"
            continue
        part = str(part)
        if len(part) > _MAX_ECHOED:  # a key as written: never a megabyte of it
            part = part[: _MAX_ECHOED - 1] + "…"
        if _BARE_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f'["{part}"]'
    return text


def _problem(detail: ErrorDetails, root: type[BaseModel]) -> Problem:
    loc = tuple(detail["loc"])
    kind = detail["type"]
    if kind == "extra_forbidden":
        message, suggestion = _unknown_key(root, loc)
        return Problem(field_path(loc), message, suggestion=suggestion)
    if kind == "missing":
        return Problem(field_path(loc), "required")
    shown = not _in_env(loc)
    meant = _meant_choice(detail) if shown else None
    return Problem(
        field_path(loc), _rule(detail), detail.get("input"), has_value=shown, suggestion=meant
    )


def _meant_choice(detail: ErrorDetails) -> str | None:
    """The allowed value closest to a mistyped one (``checkpointd`` → ``checkpointed``)."""
    found = detail.get("input")
    expected = (detail.get("ctx") or {}).get("expected")
    if detail["type"] not in ("literal_error", "enum") or not isinstance(found, str):
        return None
    allowed = re.findall(r"'([^']*)'", str(expected or ""))
    nearest = _close_matches(found, allowed, n=1, cutoff=0.6)
    return nearest[0] if nearest else None


def _in_env(loc: tuple[Any, ...]) -> bool:
    """An ``env`` table or one of its values: never echoed, since a value may be a credential
    (a bad variable *name* is echoed: pydantic reports it at the ``[key]`` marker, and the
    rules of :func:`nodus.schemas.fields.check_env` name it in their text)."""
    return _ENV in loc and loc[-1] != "[key]"


_ENV = "env"


def _rule(detail: ErrorDetails) -> str:
    context = detail.get("ctx") or {}
    if detail["type"] in ("value_error", "assertion_error") and "error" in context:
        return str(context["error"])
    if detail["type"] == "too_short" and context.get("min_length") == 1:
        return "must not be empty"
    template = _RULES.get(detail["type"])
    if template is None:
        return detail["msg"][0].lower() + detail["msg"][1:]
    try:
        return template.format(**context)
    except (KeyError, IndexError):
        return template


def _unknown_key(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, str | None]:
    """The rule for a key no model takes, and the key meant where a close one exists."""
    key = str(loc[-1])
    if len(key) > _MAX_ECHOED:  # a key is echoed as written: never a megabyte of it
        return f"unknown key of {len(key)} characters", None
    if key in _REMOVED_KEYS:
        return _REMOVED_KEYS[key], None
    model = _model_at(root, loc[:-1])
    valid = sorted(model.model_fields) if model else []
    if key in root.model_fields and model is not root:
        return f"unknown key here: '{key}' belongs at the top level of the file", None
    nearest = _close_matches(key, valid, n=1, cutoff=0.6)
    if nearest:
        return f"unknown key '{key}'; did you mean '{nearest[0]}'?", nearest[0]
    listed = ", ".join(valid)
    return f"unknown key '{key}'" + (f"; valid keys here: {listed}" if listed else ""), None


def _model_at(root: type[BaseModel], loc: Iterable[Any]) -> type[BaseModel] | None:
    """The model class that validates the table at ``loc`` (None if it is not a model)."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            current = get_args(current)[0] if get_origin(current) is list else None
        elif _is_model(current) and part in current.model_fields:
            current = current.model_fields[part].annotation
        else:
            return None
    current = _unwrap(current)
    return current if _is_model(current) else None


def _unwrap(annotation: Any) -> Any:
    """``Annotated[X, ...]`` and ``X | None`` → ``X``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _close_matches(word: str, possibilities: list[str], n: int, cutoff: float) -> list[str]:
    """``difflib.get_close_matches``, imported when a word is wrong (never on a good line)."""
    import difflib

    return difflib.get_close_matches(word, possibilities, n=n, cutoff=cutoff)
