"""The program a stage starts, fixed when the run is accepted.

A run is often accepted from a shell with a virtual environment active and recovered later by
cron or a systemd timer, whose PATH is ``/usr/bin:/bin``. Were ``python`` looked up again at
every attempt, the recovery would run whichever ``python`` that PATH finds (or none). So the
stage command's executable (``command[0]``) is resolved once, at acceptance, and stored with the
run as a :class:`Launch`; every attempt then runs that file, with that PATH in the program's
environment whatever PATH its runner has, so a launcher (``sh -c "python …"``, ``torchrun``)
finds the same programs too.

The PATH searched is the one the program would get: the stage's own ``env`` PATH when the
workload sets one (it replaces the runner's in the program's environment, and the kernel's
``execvp`` looks there), else the PATH of whoever runs ``nodus run``. A command not found
there is refused before the run is recorded (exit 2), naming the PATH and the fix. A command
containing a ``/`` is not searched: an absolute one must exist at acceptance, a relative one is
kept as written and found in the attempt's working copy (an earlier stage may be what makes
it).

When the executable is a Python interpreter (named ``python``, ``python3``, ``python3.11``,
``pypy3``…) its ``sys.version`` is stored too; an attempt that finds the interpreter's version
changed (an upgraded base interpreter under a venv) records an ``interpreter_changed`` event and
runs on: a patch upgrade is routine, and a run refused there could never be recovered.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from nodus.errors import UsageError
from nodus.schemas.resolved import ResolvedStage

_PYTHON_NAME = re.compile(r"(python|pypy)\d*(\.\d+)*")
_VERSION_PROBE = "import sys; sys.stdout.write(sys.version)"
_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Launch:
    """How every attempt of one stage starts its program."""

    command: str
    """``command[0]`` as the workload gives it."""
    executable: str
    """The file every attempt runs: absolute, or relative to the working copy."""
    path: str
    """The PATH it was found with, and the PATH the program gets."""
    python: str | None = None
    """``sys.version`` of the interpreter at acceptance; None when it is not a Python."""

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, str | None]) -> Launch:
        return cls(**data)  # type: ignore[arg-type]

    def argv(self, command: Iterable[str]) -> list[str]:
        """The stage command with its executable replaced by the stored file."""
        return [self.executable, *list(command)[1:]]

    def missing(self) -> str | None:
        """Why the stored executable cannot run any more, or None (relative ones are found by
        the start of the program itself, in the working copy)."""
        if "/" not in self.executable:  # an older nodus stored a command it did not find
            if shutil.which(self.executable, path=self.path):
                return None
            return (
                f"command {self.command!r} cannot start: not found on PATH {self.path} (check "
                "`command` and PATH)"
            )
        if not os.path.isabs(self.executable) or os.access(self.executable, os.X_OK):
            return None
        what = "is not executable any more" if os.path.exists(self.executable) else "is gone"
        return (
            f"command {self.command!r} was {self.executable} when the run was accepted (PATH "
            f"{self.path}), and {self.executable} {what}; put it back there (recreate the "
            "environment at the same path) or accept a new run"
        )


def resolve_stages(
    stages: Iterable[ResolvedStage], environ: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """``{stage name: Launch.to_dict()}`` for every stage; UsageError names an unusable path."""
    return {stage.name: resolve(stage, environ).to_dict() for stage in stages}


def resolve(stage: ResolvedStage, environ: Mapping[str, str]) -> Launch:
    """Find ``stage``'s executable the way the program's ``execvp`` would find it now."""
    command = stage.command[0]
    path = stage.env.get("PATH", environ.get("PATH", os.defpath))
    if "/" in command:
        if os.path.isabs(command) and not os.access(command, os.X_OK):
            raise UsageError(f"stage {stage.name!r}: command {command!r} is not an executable file")
        return Launch(command, command, path, python_version(command, path))
    found = shutil.which(command, path=path)
    if found is None:
        # Refused before the run is recorded: an attempt could only fail on it, and from cron a
        # failed run would hold its --key against the corrected call.
        where = "the stage's env.PATH" if "PATH" in stage.env else "the PATH of this `nodus run`"
        raise UsageError(
            f"stage {stage.name!r}: command {command!r} is not found on {where}, {path}; "
            "install it there, give its absolute path in `command`, or put its folder on PATH "
            "(from cron or systemd, set PATH in the crontab line or the unit's Environment=)"
        )
    # abspath, not realpath: a venv's python is a symlink, and the venv is known by its path.
    executable = os.path.abspath(found)
    return Launch(command, executable, path, python_version(executable, path))


def python_version(executable: str, path: str) -> str | None:
    """``sys.version`` of ``executable`` if its name says it is a Python, else None.

    nodus's own interpreter answers at no cost; another one is asked once, with the program's
    ``path``, isolated and without ``site`` (a few milliseconds). One that cannot answer (a
    wrapper that needs more of the environment, Python 2) gives None.
    """
    if not _PYTHON_NAME.fullmatch(os.path.basename(executable)) or not os.path.isabs(executable):
        return None
    try:
        if os.path.samefile(executable, sys.executable):
            return sys.version
    except OSError:
        return None
    try:
        probe = subprocess.run(
            [executable, "-I", "-S", "-c", _VERSION_PROBE],
            env={**os.environ, "PATH": path},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = probe.stdout.strip()
    return answer if probe.returncode == 0 and answer[:1].isdigit() else None


def stored(launches: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Launch]:
    """The launches a run stored; empty for a run accepted before nodus stored them."""
    return {name: Launch.from_dict(data) for name, data in (launches or {}).items()}


def device_count(environ: Mapping[str, str] | None = None) -> int:
    """Accelerators this process would hand a program: the ``CUDA_VISIBLE_DEVICES`` entries.

    Read from the environment, never by importing a framework, so the runner stays light.
    """
    value = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES", "")
    return len([part for part in value.split(",") if part.strip()])
