"""The ``hf-trainer-v1`` integration: unmodified Transformers ``Trainer`` programs under nodus.

This package is what both sides share; everything that runs inside the user's program lives in
:mod:`nodus.stages.hf.inprocess`. The runner only needs :data:`BOOTSTRAP_DIR` (the folder
it puts first on the program's ``PYTHONPATH``), so this module imports nothing heavy; the
integration itself is loaded inside the program, when ``transformers.trainer`` is imported.
Its files, variables and records are those of :mod:`nodus.protocol`. See docs/hf-trainer.md.

    inprocess/                   loaded into the user's training process, never by the runner:
      bootstrap/sitecustomize.py chains to any other sitecustomize, installs the import hook
      hook.py                    patches the Trainer class when transformers.trainer loads
      session.py                 one prepared Trainer: when to save, requests, resume
      state_copy.py / writer.py  copy state to memory at the boundary / write it in background
      cadence.py                 save_every = "auto": measure what saves cost, pick the cadence
      channel.py                 the program's side of nodus.protocol in .nodus/
      prepare.py                 prepared, unprepared or refused, when the Trainer is built
      profile.py, identity.py    the supported profile and the identity checks
    extensions.py                the profile's extensions: names, what they admit, qualify cases
    qualification.py             qualified environments (qualified.json + $NODUS_HOME record)
    qualify_program.py           the quick-start program, which `nodus qualify` trains
    qualify_extensions.py        it widened by one extension (`nodus qualify --extension NAME`)
                                 (nodus.qualify drives it through the real runner)
"""

from __future__ import annotations

import os

BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inprocess", "bootstrap")
"""Absolute folder holding the ``sitecustomize.py`` the runner prepends to ``PYTHONPATH``."""

QUALIFY_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qualify_program.py")
"""The program ``nodus qualify`` trains: a byte-for-byte copy of examples/quickstart/train.py."""

QUALIFY_EXTENSIONS_PROGRAM = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "qualify_extensions.py"
)
"""The program ``nodus qualify --extension NAME`` trains: the quick-start widened by one
extension of the profile (:mod:`nodus.stages.hf.extensions`)."""

QUALIFY_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "qualify_data.txt")
"""Its data file, ``train.txt`` beside it: a byte-for-byte copy of examples/quickstart/train.txt."""

__all__ = ["BOOTSTRAP_DIR", "QUALIFY_DATA", "QUALIFY_EXTENSIONS_PROGRAM", "QUALIFY_PROGRAM"]
