"""nodus: run training workloads declared in TOML files, with verified snapshots and recovery."""

__version__ = "0.1.0"

__all__ = ["__version__"]
