"""One attempt: one process lifetime of one stage.

    attempt.py      the attempt: sweep, prepare, launch, supervise, its end recorded
    prepare.py      the working copy laid out again, the snapshot it continues from restored
    launch.py       the program's environment and command as accepted, started
    supervise.py    the poll loop: capture, cancel, pause, hang, preemption; how it ended
    role.py         what depends on where it runs (``AttemptRole``: scope, sweep, rotation,
                    captures, hang timeout); the capture loop it polls (``CaptureLoop``)
    context.py      what a drive's attempts share (``RunContext``, frozen; ``Placement``),
                    what changes while it goes on (``DriveState``), what one attempt's parts
                    share (``AttemptFacts``)
    outcome.py      how an attempt ended (``Outcome``), told from how its program ended
    pausing.py      carrying out ``nodus runs pause`` inside the poll loop
    watch.py        the hang watch: the program's progress as the poll loop sees it

May import: catalog, processes, workspace, recovery, upkeep, remote, capture.
"""
