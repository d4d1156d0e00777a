"""The inventory: the snapshots a person works with, found, listed, held and handed out.

Two packages deal in snapshots and they never overlap:

- :mod:`nodus.store` *keeps* them: bytes, manifests, the commit protocol, verified restore,
  deletion and GC, over one ``Storage``. It knows nothing about runs, keys or people.
- this package *answers people* about them: a reference (``ID``, ``RUN@STEP``,
  ``RUN/STAGE@STEP``, a run's key) resolved through the run catalog to the store that holds it
  (``refs``), a run's snapshot rows with what holds each (``listing``, asking
  :mod:`nodus.retention.holds`), verified downloads of an artifact (``download``) and metric
  plots (``plot``), for ``nodus runs snapshots``, ``nodus snapshots get|download|pin|release``
  and ``nodus runs outputs|plot``.

Its modules import nothing heavy at module level.
"""

from nodus.inventory.refs import Located, Lookup, SnapshotRef, parse_ref

__all__ = ["Located", "Lookup", "SnapshotRef", "parse_ref"]
