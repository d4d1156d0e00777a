"""Keeping a run's store bounded and its relations true.

    rotation.py     retention applied to a stage after each commit
    gc.py           ``nodus gc`` and ``nodus runs delete``: what leaves the store after a run
    lineage.py      runs started from another run's snapshot: the check, the record, the holds
    registration.py the run's model in the registry, registered or caught up

May import: catalog.
"""
