"""The workload file: models, defaults, resolution and JSON Schema.

``resolve_file(path)`` is what the runner calls at submit; the models and
:func:`nodus.schemas.sdk.resolve` are the SDK's (``nodus.schemas.resolve`` is the resolver
module, so no function here shadows it). Names load lazily: importing ``nodus.schemas.resolved``
or ``defaults`` (as the runner and ``nodus runs list`` do) does not pay for pydantic.

    models.py         the workload file as written (the SDK's models)
    fields.py         field types of the file, each carrying its own rule
    rules.py          rules across several fields; settings that would do nothing
    problems.py       pydantic's errors as problems a person can act on
    files.py          the user's files as the loaders may open them (regular ones only)
    loader.py         TOML text → ``Workload`` → ``ResolvedWorkload``
    resolve.py        resolution: a checked ``Workload`` → the explicit ``ResolvedWorkload``
    resolved.py       the resolved workload: what a run stores and the runner executes
    remembered.py     resolutions remembered by their inputs, so an unchanged file is not rechecked
    defaults.py       the defaults users see: workload keys, the home, NODUS_* settings
    method_specs.py   each managed method described once (``MethodSpec``): TRL classes, data, rules
    backends.py       the backend registry: names, the keys each reads, drive options, modules
    methods.py        framework shortcuts: the stages a ``[method]`` table generates
    method_rules.py   what a managed method's continuation may change
    continuation.py   what a run started from another run's snapshot may change
    snapshot_ref.py   the grammar of a snapshot reference (``ID``, ``RUN@STEP``, ``RUN/STAGE@STEP``)
    units.py          sizes in the binary units the limits are written in
    jsonschema.py     the JSON Schema for editors (``nodus schema``)
    sdk.py            the SDK's entry point over files, submissions and ``Workload`` values
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
