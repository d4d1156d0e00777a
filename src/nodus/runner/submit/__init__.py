"""The runner's entry points: accept or resume a run, claim it, drive it or detach it.

    claim.py        claim a run (its lock), then drive it here or in the background
    acceptance.py   a workload file becomes a run with its resolution and source stored
    detach.py       the background runner's arguments, and its claim of the QUEUED run (the
                    process is the client's: ``python -m nodus.cli.background``)

The top room: may import every other room of the runner.
"""
