"""Retention: which artifact kinds of which snapshots may go, and what holds the rest.

Between the runner and the store (``runner → retention → store``). It decides and never
deletes: the store executes every deletion (``store.delete_kind``), and the callers (the
runner's rotation after each commit, ``nodus gc``) apply what it decides.

- :mod:`~nodus.retention.holds`: the meaning of holds, stored (pin, released epoch hold) and
  derived (epoch, resume target, the run's model, branches); ``run_holds`` gives every hold of
  a run's checkpoints, and nothing else decides what a hold protects.
- :mod:`~nodus.retention.policy`: pure functions over manifests and their holds (``rotation``,
  ``expiry``) returning the :class:`~nodus.retention.policy.Deletion` list, no I/O.

    holds.py      what holds a snapshot, stored and derived
    policy.py     rotation and expiry: pure functions returning deletions
"""

from nodus.retention.holds import Hold, HoldIndex, protected_kinds, run_holds
from nodus.retention.policy import Deletion, expiry, rotation

__all__ = ["Deletion", "Hold", "HoldIndex", "expiry", "protected_kinds", "rotation", "run_holds"]
