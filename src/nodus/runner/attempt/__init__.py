"""One attempt: one process lifetime of one stage.

    attempt.py      prepare the working copy, run the program, poll, capture, classify
    context.py      what every attempt of one drive shares (``RunContext``)
    outcome.py      how an attempt ended (``Outcome``), told from how its program ended
    pausing.py      carrying out ``nodus runs pause`` inside the poll loop
    watch.py        the hang watch: the program's progress as the poll loop sees it

May import: catalog, processes, workspace, recovery, upkeep, remote, capture.
"""
