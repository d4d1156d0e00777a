"""The model registry: named models, numbered versions, aliases, ``NAME[:VERSION|@ALIAS]``.

Between the runner and retention (``runner → registry → retention → store``): the runner
registers what a run makes (:mod:`nodus.runner.upkeep.registration`, registration's one home),
the inventory and the command line look versions up and change them (:class:`Registry`).
Numbers and aliases live in the run catalog (:mod:`nodus.registry.table`); each version's
record, its own reference to the weights' blobs, lives in the store
(:mod:`nodus.store.model_records`); both are read into one
:class:`nodus.store.model_records.ModelVersion`. docs/lineage.md is the user's view.

    naming.py        model names, aliases, the ``NAME[:VERSION|@ALIAS]`` grammar
    registry.py      ``Registry``: register, resolve, alias, delete, adopt
    table.py         its tables in the run catalog (applied as one of the catalog's migrations)
"""

from nodus.registry.naming import ModelRef, parse_model_ref
from nodus.registry.registry import Registry

__all__ = ["ModelRef", "Registry", "parse_model_ref"]
