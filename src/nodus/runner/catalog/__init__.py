"""What nodus processes share about runs: the run catalog and the run locks.

    core.py         the SQLite catalog: runs, stages, attempts, events, control requests
    phases.py       a run's phases, how an attempt ends, and the exit status of each
    run_ids.py      the shape of a run id
    locks.py        at most one runner per run (an OS file lock the kernel releases)
    unrecorded.py   saves that never reached the store, as the catalog's events record them
    attempt_context.py  what one attempt's workers share (store, catalog, run, stage, number)

The bottom room of the runner: it imports no other room.
"""
