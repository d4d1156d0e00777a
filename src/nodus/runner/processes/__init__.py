"""The processes of an attempt: started, watched, contained and ended as one tree.

    stage_process.py  the runner's handle on one stage program (through its supervisor)
    supervisor.py     the per-attempt process (its own interpreter) that is the program's parent,
                      a child subreaper that stops the whole tree on every way out
    messages.py       what runner and supervisor say to each other, defined once
    tree.py           the supervisor's view of the tree: members, pidfds, foreign deaths
    procevents.py     the kernel's process-events connector: exit statuses as processes die
    containment.py    the attempt token and the sweep that ends what a lost attempt left
    procfs.py         the few /proc and prctl calls the above need

Nothing here imports more than the standard library and ``nodus.schemas.defaults``/``protocol``:
the supervisor starts with every attempt and must start fast.
"""
