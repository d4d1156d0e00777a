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

    refs.py       a snapshot named on the command line (``ID``, ``RUN@STEP``, a key) → its store
    runs.py       runs as users see them: the documented ``--json`` shapes, built once
    protection.py whether a run is protected, and why not: stated from its events, never assumed
    listing.py    ``nodus runs snapshots``, ``nodus snapshots get``: saves and their holds
    download.py   ``nodus snapshots download``, ``nodus runs outputs``: verified copies out
    merging.py    ``--artifact model`` of a LoRA checkpoint: merged into the run's base model
    models.py     ``nodus models …``: the registry as people ask about it
    plot.py       ``nodus runs plot``: metrics over steps, snapshots and recoveries
    progress.py   a one-line progress bar for long transfers, on a terminal only
    narration.py  what happens to a run (interruptions, recoveries, snapshots), said as it happens
    overview.py   ``nodus ui``'s runs table: a page of runs with their newest snapshot and bytes
    glance.py     ``nodus runs list``'s duration, step and newest loss: no store opened
    metric_summary.py  ``nodus ui``'s lists: a run's newest and best loss (or reward)
    output.py     a run's program output per attempt, from an offset (``nodus ui`` follows it)
    resources.py  a running attempt's CPU and memory (``/proc``) and its machine's GPUs
"""

from nodus.inventory.refs import Located, Lookup, SnapshotRef, parse_ref

__all__ = ["Located", "Lookup", "SnapshotRef", "parse_ref"]
