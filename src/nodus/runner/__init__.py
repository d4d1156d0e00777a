"""Runs: accepted, driven stage by stage, snapshotted while they train, recovered.

Each sub-package is a room; a room imports only the rooms below it (``tests/test_layering.py``
checks the order, and that no room's modules import each other in a circle):

    submit/      accept a workload or resume a run, claim it (its lock), drive or detach it
    engine.py    drive a claimed run: stages in order, attempts, recovery between attempts
    control/     the asking side of wait, pause and cancel, from another nodus process
    backends/    where an attempt runs: here, or on a Ray node (one protocol)
    attempt/     one attempt: working copy, program, poll loop, pause, how it ended
    capture/     what becomes a snapshot, and when; the disk guard
    remote/      the run's record and lease in its store, adoption, background uploads
    upkeep/      rotation after each commit, gc after the run, lineage, the run's model
    recovery/    which snapshot a recovery restores, and when to stop recovering
    processes/   the attempt's process tree: supervisor, containment
    workspace/   the folders an attempt runs in, the run's source, the launch
    catalog/     the run catalog (SQLite), phases and exit statuses, run locks and ids

Nothing below ``engine`` imports it; the CLI, the client and ``nodus.qualify`` use the runner
through ``submit``, ``control`` and the catalog.
"""
