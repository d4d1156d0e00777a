"""Controlling a run from another nodus process: wait for it, pause it, cancel it.

    outside.py       wait, cancel (and cancel a run whose runner is gone)
    pause_request.py the asking side of ``nodus runs pause``

The request is a catalog row; the run's runner carries it out (``attempt/pausing.py``).
May import: catalog, processes.
"""
