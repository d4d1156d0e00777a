"""Where an attempt runs: its working copy, private folders, environment and integration file.

    $NODUS_HOME/work/<run>/<stage>/<attempt>/
        copy/            the run's source with the restored selection laid over it (cwd)
        copy/state/      NODUS_CHECKPOINT_DIR, whatever the selection
        copy/.nodus/     NODUS_CONTROL_DIR: the control files of nodus.protocol (never captured)
        tmp/runtime/     TMPDIR; runtime/ is for rebuildable installs, outside the selection
        cache/           HF_HOME, XDG_CACHE_HOME, PIP_CACHE_DIR
        output.log       everything the program printed

Everything an attempt may scribble on outside the selection lives here, so a recovered attempt
starts from exactly the source plus the committed selection and nothing else.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from nodus import protocol
from nodus._atomic import write_json_atomic
from nodus.schemas import defaults
from nodus.schemas.resolved import ResolvedStage


@dataclass(frozen=True)
class Workspace:
    root: str

    @classmethod
    def of(cls, home: str, run_id: str, stage: str, attempt: int) -> Workspace:
        return cls(os.path.join(home, defaults.WORK_DIR, run_id, stage, str(attempt)))

    @property
    def copy(self) -> str:
        return os.path.join(self.root, "copy")

    @property
    def state(self) -> str:
        return os.path.join(self.copy, protocol.STATE_DIR)

    @property
    def private(self) -> str:
        return os.path.join(self.copy, protocol.CONTROL_DIR)

    @property
    def control(self) -> protocol.ControlPaths:
        """The protocol's files in the private folder."""
        return protocol.ControlPaths(self.private)

    @property
    def tmp(self) -> str:
        return os.path.join(self.root, "tmp")

    @property
    def cache(self) -> str:
        return os.path.join(self.root, "cache")

    @property
    def log_path(self) -> str:
        return os.path.join(self.root, "output.log")

    def private_path(self, *parts: str) -> str:
        return os.path.join(self.private, *parts)

    def reset_copy(self) -> None:
        """An empty copy folder (a failed restore must not leave half a snapshot behind)."""
        shutil.rmtree(self.copy, ignore_errors=True)
        os.makedirs(self.root, exist_ok=True)

    def make_private_folders(self) -> None:
        for folder in (
            self.state,
            *self.control.runner_folders(),
            os.path.join(self.tmp, protocol.RUNTIME_DIR),
            *(os.path.join(self.cache, name) for name in protocol.CACHE_VARIABLES.values()),
        ):
            os.makedirs(folder, exist_ok=True)

    def discard_copy(self) -> None:
        """Free the disk of a finished attempt; its log stays for ``nodus runs logs``."""
        shutil.rmtree(self.copy, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def stage_environment(
    ws: Workspace, stage: ResolvedStage, run_id: str, attempt: int, base: dict[str, str]
) -> dict[str, str]:
    """The program's environment: the runner's, then the stage's ``env``, then nodus's own."""
    env = dict(base)
    env.update(stage.env)
    env.update(
        protocol.program_environment(
            state=ws.state,
            control=ws.private,
            tmp=ws.tmp,
            cache=ws.cache,
            run_id=run_id,
            stage=stage.name,
            attempt=attempt,
        )
    )
    if stage.integration in protocol.INTEGRATIONS:
        bootstrap = _bootstrap_dir()
        if bootstrap:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (bootstrap, env.get("PYTHONPATH", "")) if p
            )
    return env


def _bootstrap_dir() -> str | None:
    # Imported here: the hf package is optional at runtime and must not slow `nodus runs list`.
    try:
        from nodus.stages.hf import BOOTSTRAP_DIR
    except ImportError:
        return None
    return BOOTSTRAP_DIR


def write_integration(
    ws: Workspace,
    stage: ResolvedStage,
    run_id: str,
    attempt: int,
    restored: int | None,
    home: str,
    qualifying: bool = False,
) -> None:
    """``.nodus/integration.json``: the settings the prepared Trainer reads at start.

    ``qualifying`` comes from the runner's caller (``nodus qualify``), never from a workload.
    """
    if stage.integration not in protocol.INTEGRATIONS:
        return
    settings = protocol.Settings(
        integration=stage.integration,
        save_every=stage.execution.save_every,
        save_each_epoch=stage.execution.save_each_epoch,
        restored_step=restored,
        run_id=run_id,
        stage=stage.name,
        attempt=attempt,
        home=home,
        qualifying=qualifying,
    )
    write_json_atomic(ws.control.settings, settings.to_dict())
