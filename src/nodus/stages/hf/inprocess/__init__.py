"""The hf-trainer-v1 integration as it runs inside the user's training process.

Nothing here is imported by the runner: the bootstrap ``sitecustomize`` (put first on the
program's ``PYTHONPATH``) installs :mod:`.hook`, which loads the rest when the program imports
``transformers.trainer``. It talks to the runner only through the files of :mod:`nodus.protocol`.
"""
