"""Immutable, content-addressed, verified snapshots over fsspec URLs."""
