"""What becomes a snapshot, and when: the capture loop of one attempt.

    capturer.py     save records, settled checkpoint folders, the program's exit → commits
    selection.py    what one capture takes, narrowed to one step's checkpoint folder
    disk_guard.py   periodic saves stop before the staging disk fills up

May import: catalog, workspace, upkeep (rotation after each commit), remote (uploads).
"""
