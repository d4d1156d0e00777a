"""The backend registry: every place a stage's attempts can run, one entry each.

An entry declares what the rest of nodus needs to know of a backend without loading it: its name
(``[execution] backend``, ``--backend``), where it runs (the schema's description), the
``[execution]`` keys only it reads (refused as settings without effect elsewhere,
:mod:`nodus.schemas.rules`), the options a drive on it takes (``--ray-address``: added to
``nodus run`` and ``nodus runs resume`` and passed through to it as they are) and the runner module
that implements it (:class:`nodus.runner.backends.base.Backend`: its acceptance checks, its
attempts, its node side). The workload schema, the command line and the runner all read this
table; adding a backend is a module of its own and an entry here (docs/internals.md).

It lives below the runner so the workload schema and the command line read it without loading
the runner (``nodus validate`` stays light).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DriveOption:
    """An option of a drive on one backend (``--ray-address ADDR``), given on ``nodus run`` and
    ``nodus runs resume``; the generic code carries its value to the backend untouched."""

    flag: str  # "--ray-address"
    metavar: str
    help: str

    @property
    def dest(self) -> str:
        """Its argparse destination: ``ray_address``."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class BackendEntry:
    """One backend as the registry declares it."""

    name: str
    where: str  # how the schema's description says where its attempts run
    runner: str  # the module whose ``BACKEND`` implements it
    execution_keys: tuple[str, ...] = ()  # [execution] keys only this backend acts on
    options: tuple[DriveOption, ...] = ()


LOCAL = BackendEntry(name="local", where="this machine", runner="nodus.runner.backends.local")

RAY = BackendEntry(
    name="ray",
    where="a Ray cluster: `--ray-address`, RAY_ADDRESS, or the cluster this machine belongs to",
    runner="nodus.runner.backends.ray_backend",
    execution_keys=("cpus", "memory", "gpu_count", "nodes", "shared_store"),
    options=(
        DriveOption(
            "--ray-address",
            "ADDR",
            "the Ray cluster (default: RAY_ADDRESS, else the cluster this machine is in)",
        ),
    ),
)

SLURM = BackendEntry(
    name="slurm",
    where="a Slurm cluster: each attempt is a job submitted with sbatch from this machine",
    runner="nodus.runner.backends.slurm_backend",
    execution_keys=(
        "cpus",
        "memory",
        "gpu_count",
        "nodes",
        "shared_store",
        "partition",
        "account",
        "qos",
        "time_limit",
        "signal_lead",
        "sbatch_options",
    ),
)

REGISTRY: dict[str, BackendEntry] = {entry.name: entry for entry in (LOCAL, RAY, SLURM)}
"""Every backend by name, in the order the schema and ``--help`` list them."""

NAMES = tuple(REGISTRY)
DEFAULT = LOCAL.name
"""``[execution] backend`` when it is not given: this machine."""


def drive_options() -> list[DriveOption]:
    """Every backend's drive options, each once (two backends may share one)."""
    found: dict[str, DriveOption] = {}
    for entry in REGISTRY.values():
        for option in entry.options:
            found.setdefault(option.flag, option)
    return list(found.values())
