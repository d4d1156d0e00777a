"""Where an attempt runs: its folders, the run's source, and the program it starts.

    layout.py       the working copy and the private folders of an attempt (``Workspace``)
    source.py       what acceptance captures from the code folder (``.nodusignore``)
    launch.py       the stage's executable, resolved once at acceptance

Imports no other room of the runner.
"""
