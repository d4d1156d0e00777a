"""The hf-trainer-v1 integration as it runs inside the user's training process.

Nothing here is imported by the runner: the bootstrap ``sitecustomize`` (put first on the
program's ``PYTHONPATH``) installs :mod:`.hook`, which loads the rest when the program imports
``transformers.trainer``. It talks to the runner only through the files of :mod:`nodus.protocol`.

    bootstrap/        ``sitecustomize.py``: chains to any other, installs the import hook
    hook.py           patches the ``Trainer`` class when ``transformers.trainer`` loads
    prepare.py        prepared, unprepared or refused, when the Trainer is built
    profile.py        the hf-trainer-v1 profile, checked when the Trainer is built
    method_profile.py what nodus's own managed-method program may train
    session.py        one prepared Trainer: when to save, requests, resume
    own_saves.py      a Trainer that also saves checkpoints of its own: named once, with the cost
    cadence.py        ``save_every = "auto"``: measure what saves cost, pick the cadence
    state_copy.py     copy a checkpoint's state to memory at an optimizer boundary
    state_json.py     ``trainer_state.json`` written at a cost that does not grow with the run
    writer.py         write captured checkpoints in the background, publish by rename
    collation.py      a collator drawing random numbers resumes exactly
    world.py          the processes training together, as a session sees them
    identity.py       identities recorded with every checkpoint, checked before a resume
    channel.py        the program's side of ``nodus.protocol`` in ``.nodus/``
"""
