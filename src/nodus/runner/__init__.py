"""Runs: accepted, driven stage by stage, snapshotted while they train, recovered.

service.py, acceptance.py   accept a workload (or resume a run) and claim it
engine.py, attempt.py       drive the stages; one attempt = one process lifetime
snapshotting.py             what becomes a snapshot, and when (the capture loop)
rotation.py, lineage.py     retention after each commit, beside the capture loop; the runs
                            that start from a run's snapshots (branch holds)
processes/                  the attempt's process tree: supervisor, containment
workspace.py, launch.py     where and with what an attempt runs
catalog.py, phases.py       the run catalog (SQLite); phases and exit statuses
control.py, pausing.py, pause_request.py, locks.py, detach.py
                            cancel/pause/resume between nodus processes
views.py, qualify.py        the --json shapes; `nodus qualify`
"""
