"""nodus: run training workloads declared in TOML files, with verified snapshots and recovery.

The SDK's names load on first use, so ``import nodus`` (and every ``nodus`` command, which
imports this package) stays cheap: pydantic is imported only when a workload is touched, the
runner and the store only when a :class:`Client` does something.

Its packages and modules, top first (each imports only those below it; docs/internals.md draws
the order and tests/test_layering.py checks it):

    __main__.py   ``python -m nodus``: the command line
    cli/          the command line: parse, call the client, print, exit status
    ui/           ``nodus ui``: a read-only page of the runs, through a read-only client
    client.py     ``nodus.Client``, the SDK; the command line is a thin layer over it
    qualify.py    the suite behind ``nodus qualify``: the real runner, interrupted on purpose
    inventory/    snapshots as people ask about them: references, listings, downloads, plots
    runner/       runs: accepted, driven, snapshotted while they train, recovered
    registry/     the model registry: named models, numbered versions, aliases
    retention/    which kinds of which snapshots may go, and what holds the rest
    store/        keeps snapshots: storage, blobs, manifests, verified restore, deletion, GC
    stages/       what runs inside a stage: the directory contract, hf-trainer-v1, methods
    schemas/      the workload file: models, defaults, resolution, JSON Schema
    testing/      the shipped ``counter`` program, for users' own tests
    protocol.py   the runner ↔ program protocol: every name and format between the two
    errors.py     every error nodus reports to a user, in one tree
    _atomic.py    files and folders replaced atomically, readable by their owner only
    _logging.py   loggers that import ``logging`` only when a message can reach someone
"""

from __future__ import annotations

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
    import importlib  # here: every attempt's supervisor imports this package, never a name

    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
