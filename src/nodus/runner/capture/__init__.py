"""What becomes a snapshot, and when: the capture loop of one attempt.

    capturer.py     save records, settled checkpoint folders, the program's exit → commits
    selection.py    what one capture takes, narrowed to one step's checkpoint folder
    disk_guard.py   periodic saves stop before the staging disk fills up
    metrics.py      a directory-contract program's logged metrics: kept beside the attempt's
                    output, given to each of its snapshots

May import: catalog, workspace, upkeep (rotation after each commit), remote (uploads).
"""
