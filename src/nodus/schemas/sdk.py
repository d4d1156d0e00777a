"""The SDK's entry point over files, submissions and :class:`Workload` values."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nodus.schemas.loader import load_workload, workload_from_document
from nodus.schemas.models import Overrides, Workload
from nodus.schemas.resolve import resolve as resolve_workload
from nodus.schemas.resolved import ResolvedWorkload


def resolve(
    workload: Workload | Mapping[str, Any] | str | os.PathLike[str],
    *,
    base_dir: str | None = None,
    overrides: Overrides | Mapping[str, Any] | None = None,
) -> ResolvedWorkload:
    """Resolve a :class:`Workload`, a submission dict, or the workload file at a path.

    ``base_dir`` is the folder ``code`` is relative to: by default the workload file's folder,
    or the current directory for a workload built in Python. ``overrides`` win over every stage
    (command line > stage > workload > defaults). Raises :class:`~nodus.errors.WorkloadError`.
    """
    if isinstance(workload, (str, os.PathLike)):
        workload = load_workload(workload)
    elif not isinstance(workload, Workload):
        workload = workload_from_document(workload)
    return resolve_workload(workload, base_dir=base_dir, overrides=overrides)
