"""Snapshots as users see them: references, listings, holds, downloads and plots.

The store (:mod:`nodus.store`) keeps snapshots; this package answers the questions people ask
about them on the command line (``nodus runs snapshots``, ``nodus snapshots get|download|pin|
release``, ``nodus runs outputs|plot``). Its modules import nothing heavy at module level.
"""

from nodus.snapshots.refs import Located, Lookup, SnapshotRef, parse_ref

__all__ = ["Located", "Lookup", "SnapshotRef", "parse_ref"]
