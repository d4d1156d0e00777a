"""The workload file: models, defaults, resolution and JSON Schema.

``resolve_file(path)`` is what the runner calls at submit; the models and
:func:`nodus.schemas.sdk.resolve` are the SDK's (``nodus.schemas.resolve`` is the resolver
module, so no function here shadows it). Names load lazily: importing ``nodus.schemas.resolved``
or ``defaults`` (as the runner and ``nodus runs list`` do) does not pay for pydantic.
"""

from __future__ import annotations

import importlib

# Not `typing`'s: every attempt's supervisor imports this package, and importing typing would
# be a fifth of its start-up. Annotations are strings here (PEP 563).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nodus.schemas.jsonschema import workload_json_schema
    from nodus.schemas.loader import load_workload, read_document, resolve_file
    from nodus.schemas.models import (
        Continuity,
        ContinuityMode,
        Execution,
        Framework,
        Integration,
        Method,
        Overrides,
        Stage,
        Workload,
    )
    from nodus.schemas.resolved import (
        ResolvedContinuity,
        ResolvedExecution,
        ResolvedStage,
        ResolvedWorkload,
    )

_HOMES = {
    "Continuity": "models",
    "ContinuityMode": "models",
    "Execution": "models",
    "Framework": "models",
    "Integration": "models",
    "Method": "models",
    "Overrides": "models",
    "ResolvedContinuity": "resolved",
    "ResolvedExecution": "resolved",
    "ResolvedStage": "resolved",
    "ResolvedWorkload": "resolved",
    "Stage": "models",
    "Workload": "models",
    "load_workload": "loader",
    "read_document": "loader",
    "resolve_file": "loader",
    "workload_json_schema": "jsonschema",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
