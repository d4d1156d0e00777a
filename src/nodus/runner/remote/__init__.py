"""A run's life in a remote store: its record and lease, adoption, background uploads.

    record.py       the run's record and lease in its store, written as the run changes
    adoption.py     a run this machine's catalog does not know, rebuilt from its record
    uploads.py      the runner's side of the background upload to a remote store

May import: catalog, upkeep, workspace.
"""
