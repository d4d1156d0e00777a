"""nodus: run training workloads declared in TOML files, with verified snapshots and recovery.

The SDK's names load on first use, so ``import nodus`` (and every ``nodus`` command, which
imports this package) stays cheap: pydantic is imported only when a workload is touched, the
runner and the store only when a :class:`Client` does something.
"""

from __future__ import annotations

import importlib

# Not `typing`'s: every attempt's supervisor imports this package, and importing typing would
# be a fifth of its start-up. Annotations are strings here (PEP 563).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nodus.client import Client
    from nodus.schemas.loader import load_workload
    from nodus.schemas.models import Continuity, ContinuityMode, Integration, Stage, Workload
    from nodus.schemas.sdk import resolve

__version__ = "0.1.0"

_HOMES = {
    "Client": "nodus.client",
    "Continuity": "nodus.schemas.models",
    "ContinuityMode": "nodus.schemas.models",
    "Integration": "nodus.schemas.models",
    "Stage": "nodus.schemas.models",
    "Workload": "nodus.schemas.models",
    "load_workload": "nodus.schemas.loader",
    "resolve": "nodus.schemas.sdk",
}

__all__ = [
    "Client",
    "Continuity",
    "ContinuityMode",
    "Integration",
    "Stage",
    "Workload",
    "__version__",
    "load_workload",
    "resolve",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
