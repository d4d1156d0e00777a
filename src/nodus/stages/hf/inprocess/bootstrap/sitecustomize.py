"""nodus bootstrap: prepares a Trainer program without any change to it.

The runner puts this folder first on ``PYTHONPATH`` when a stage's integration is ``auto`` or
``hf-trainer-v1``. Python imports ``sitecustomize`` once at start-up, so this file runs before the
user's script. It does two things, and nothing heavy:

1. chains to the ``sitecustomize`` that would have been imported without us (the way
   OpenTelemetry's auto-instrumentation does), so a site's own customisation keeps working;
2. installs an import hook that patches ``transformers.trainer.Trainer`` right after that module
   loads, when the attempt's control folder holds integration settings; the integration itself
   (``nodus.stages.hf.inprocess.hook``) is imported only then.

The settings are looked for with the runner's own ``nodus/protocol.py`` (the package this folder
belongs to, loaded by its path: it imports nothing but the standard library), whatever ``nodus``
the program's interpreter may or may not have installed.

All of that waits for the program's first import of ``transformers``: loading the protocol
(``dataclasses``, ``inspect``, ``re``...) costs a bare interpreter 15 ms, three times its own
start, and a program that never imports transformers (``integration = "auto"`` may be set for
any command) should not pay it on every start and every recovery. The hook only has to be
in place before ``transformers.trainer`` loads, which always comes after its package.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# bootstrap → inprocess → hf → stages → nodus → the folder holding the nodus package
_PACKAGES = os.path.abspath(os.path.join(_HERE, *[os.pardir] * 5))
_PROTOCOL = "_nodus_bootstrap_protocol"


def _chain_to_next_sitecustomize():
    """Import the next ``sitecustomize`` on the path, with this folder hidden from the search."""
    saved_path = list(sys.path)
    ours = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    try:
        import sitecustomize  # noqa: F401  (the next one down the path, if any)
    except ImportError:
        pass
    except Exception as error:  # someone else's start-up code must not stop the program
        print(f"nodus: the chained sitecustomize failed: {error!r}", file=sys.stderr)
    finally:
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


class _OnTransformers:
    """A meta-path finder that finds nothing: the first import of ``transformers`` (or of one
    of its modules) installs the hook, then this finder leaves the path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "transformers" or fullname.startswith("transformers."):
            sys.meta_path.remove(self)
            _install_hook()
        return None


def _protocol():
    """``nodus/protocol.py`` next to this folder, as a private module of the bootstrap."""
    import importlib.util

    path = os.path.join(_PACKAGES, "nodus", "protocol.py")
    spec = importlib.util.spec_from_file_location(_PROTOCOL, path)
    assert spec is not None and spec.loader is not None  # a .py path: a source file loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PROTOCOL] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def _install_hook():
    paths = _protocol().ControlPaths.from_environment()
    if paths is None or not os.path.isfile(paths.settings):
        return
    try:
        from nodus.stages.hf.inprocess.hook import install
    except ImportError:
        # The program's interpreter may not have nodus installed: reach the package next to us.
        sys.path.append(_PACKAGES)
        from nodus.stages.hf.inprocess.hook import install
    install()


_chain_to_next_sitecustomize()
if "transformers" in sys.modules:  # imported by a site's own start-up code already
    _install_hook()
else:
    sys.meta_path.insert(0, _OnTransformers())
