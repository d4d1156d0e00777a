"""The runner's entry points: accept or resume a run, claim it, drive it or detach it.

    claim.py        claim a run (its lock), then drive it here or in the background
    acceptance.py   a workload file becomes a run with its resolution and source stored
    detach.py       ``python -m nodus.runner.submit.detach``: the background runner

The top room: may import every other room of the runner.
"""
