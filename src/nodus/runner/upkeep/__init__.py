"""Keeping a run's store bounded and its relations true.

    rotation.py     retention applied to a stage after each commit
    gc.py           gc's one home: ``nodus gc`` and ``nodus runs delete``, what leaves the store
                    after a run (the store's sweep is its mechanics, retention's expiry its rule)
    lineage.py      runs started from another run's snapshot: the check, the record, the holds
    registration.py registration's one home: epoch saves and the run's model, registered
                    or caught up

May import: catalog.
"""
