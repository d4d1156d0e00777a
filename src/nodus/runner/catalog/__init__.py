"""What nodus processes share about runs: the run catalog and the run locks.

    core.py         the SQLite catalog (``Catalog``): the table sets over one connection, and
                    the schema's migrations
    connection.py   the connection: WAL, busy timeout, transactions, the migration runner
                    (statements one by one), what a locked or damaged catalog means
    runs.py         the runs table (``Run``): create, find, list, move, delete
    attempts.py     the stages and attempts tables: attempt numbers, how each attempt ended
    events.py       the events table: a run's log
    requests.py     the controls and pauses tables: what other processes ask of a runner
    phases.py       a run's phases, how an attempt ends, and the exit status of each
    lifecycle.py    every change of a run's phase (``RunLifecycle``), checked against one table
    run_ids.py      the shape of a run id
    locks.py        at most one runner per run (an OS file lock the kernel releases)
    unrecorded.py   saves that never reached the store, as the catalog's events record them
    event_types.py  every type of event a run's log holds, listed once
    attempt_context.py  what one attempt's workers share (store, catalog, run, stage, number)

The bottom room of the runner: it imports no other room.
"""
