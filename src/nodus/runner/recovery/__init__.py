"""Recovery decisions: what follows an attempt, which snapshot the next one restores.

    decisions.py    what follows an attempt (next stage, recover, stop) and which snapshots
                    an attempt tries to restore: pure functions over plain data
    suspects.py     a restored snapshot the program could not continue from is passed over
    continuing.py   what "continue this run" means for `run --key`, `runs resume` and an
                    adoption (continue, leave it, give the key to a new run), and where a
                    continued stage starts: pure functions over plain facts
    hangs.py        whether a running program hangs, and its timeout now (hang_timeout)

May import: catalog (how an attempt ended, as :mod:`nodus.runner.catalog.phases` names it).
"""
