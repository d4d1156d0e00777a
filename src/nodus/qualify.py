"""The qualification suite behind ``nodus qualify``: the real runner, interrupted on purpose.

One uninterrupted bare run of the quick-start program (no nodus at all) sets the reference
weights. The runner then runs the same program under hf-trainer-v1 (``save_every = 1``,
``save_each_epoch``) in a temporary ``NODUS_HOME`` with a ``file://`` store under it, exactly as
``nodus run`` would, while a watcher thread SIGKILLs the program: after the saves of the steps in
``HF_QUALIFY_KILL_STEPS`` (inside epoch 0, at an epoch boundary, inside a later epoch) and once
in the middle of a save. nodus sends none of those signals, so the runner treats each as an
interruption and recovers from the newest committed snapshot by itself. The environment
qualifies when the run's outputs are bit-identical to the reference and the interrupted save
never became a committed snapshot (nor a folder in ``state/``).

Kills are timed by the integration's write delay (``protocol.ENV_WRITE_DELAY``), which the runner
passes from its own environment to each program it starts: a short one paces the saves, so a
kill after the save of step K lands before step K+1 is published and the recovery resumes from
exactly K; a long one holds the attempt that is killed in the middle of its first save. The
runner must be driven from the main thread (it installs its preemption-notice handlers).

A case of several processes (``--extension processes``: the program under ``torchrun``) kills one
rank, not the launcher, as a crash or an OOM kill of one process would: the launcher then ends
the other ranks and exits non-zero, and the whole world restarts from the same snapshot. The
ranks killed take turns (rank 1 first); in the middle of a save a rank that is not writing the
checkpoint is killed (rank 0 writes it and is ended by the launcher).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodus import protocol
from nodus.runner.catalog.core import Catalog
from nodus.runner.engine import Runner
from nodus.runner.processes import procfs
from nodus.runner.submit.acceptance import accept
from nodus.runner.submit.claim import open_run_store
from nodus.runner.workspace.layout import Workspace
from nodus.schemas import defaults
from nodus.stages.hf import QUALIFY_DATA, QUALIFY_EXTENSIONS_PROGRAM, QUALIFY_PROGRAM, extensions
from nodus.stages.hf.qualification import current_versions, record_result

HF_QUALIFY_KILL_STEPS = (5, 12, 27)
"""Steps after whose save ``nodus qualify`` kills the program (12 steps per epoch: inside epoch 0,
exactly at the end of epoch 0, inside epoch 2); one more kill lands in the middle of a save."""

HF_QUALIFY_WRITE_DELAY_S = 0.5
"""``nodus qualify`` holds each save this long before it is published: a kill after the save of
step K then lands well before step K+1 is published, so the recovery resumes from exactly K."""

STAGE = defaults.STAGE_NAME
PROGRAM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "disabled",
    # 12 optimizer steps per epoch, 3 epochs: the kill steps fall inside epochs 0 and 2 and on
    # the boundary between epochs 0 and 1.
    "QUICKSTART_EPOCHS": "3",
    # The machine's default device (a GPU where there is one): that is what is being qualified.
    "QUICKSTART_USE_CPU": "0",
}
NOT_DETERMINISTIC = (
    "two uninterrupted runs of the same program, with the same seed, ended with different "
    "weights: this environment does not train deterministically (on a GPU even with "
    "full_determinism=True and CUBLAS_WORKSPACE_CONFIG=:4096:8, which the qualification sets "
    "there), so no resumed run can be bit-identical to an uninterrupted one; see "
    'docs/hf-trainer.md, "On a GPU"'
)
GPU_DETERMINISM = {"QUICKSTART_FULL_DETERMINISM": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
"""What the qualification program needs on a GPU to train the same bits twice: CUDA's default
kernels (atomic adds in an embedding's backward, cuBLAS's split reductions) do not."""
HOLD_SAVE_S = "3600"
"""The write delay of the attempt killed mid-save: its first save is still unpublished when the
kill lands, however slow the machine."""
WAIT_S = 600.0
"""How long the watcher waits for a save before it gives up (a healthy wait takes seconds)."""
Say = Callable[[str], None]


@dataclass
class Result:
    passed: bool
    reference: str = ""
    resumed: str = ""
    resumed_from: list[int | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    record: str = ""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Each attempt of the interrupted run: number, outcome, detail, restored_step."""
    extension: str | None = None
    device: str = ""
    """The device type the program trained on (``cpu``, ``cuda``): what an extension is
    qualified for."""


@dataclass(frozen=True)
class Case:
    """What one qualification trains: the program, its launcher words and settings."""

    program: str = "train.py"
    launcher: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    processes: int = 1
    """How many ranks the launcher starts; more than one: the killer kills one rank."""

    @classmethod
    def of(cls, extension: str | None, env: dict[str, str] | None = None) -> Case:
        if extension is None:
            return cls()
        spec = extensions.EXTENSIONS[extension]
        launcher: tuple[str, ...] = ()
        if spec.processes > 1:
            launcher = (
                *(sys.executable, "-m", "torch.distributed.run", "--standalone"),
                *("--nproc_per_node", str(spec.processes)),
            )
        case_env = dict(spec.case_env if env is None else env)
        return cls(EXTENSION_PROGRAM, launcher, case_env, spec.processes)

    @classmethod
    def all_of(cls, extension: str | None, device: str) -> list[Case]:
        """Every case that qualifies ``extension`` on ``device``: its case, its more cases
        (trl: sft, then dpo), and on an accelerator its accelerator cases (mixed precision:
        bf16, then fp16)."""
        if extension is None:
            return [cls()]
        spec = extensions.EXTENSIONS[extension]
        more = (*spec.more_cases, *(spec.accelerator_cases if device != "cpu" else ()))
        return [cls.of(extension), *(cls.of(extension, env) for env in more)]


EXTENSION_PROGRAM = "extension.py"
"""The name ``qualify_extensions.py`` has in the qualification's working copy."""


def qualify(home: str, say: Say = print, extension: str | None = None) -> Result:
    """Run the suite in a temporary folder under ``home``; record the result in ``home``."""
    versions = current_versions()
    device = default_device()
    result: Result | None = None
    for case in Case.all_of(extension, device):
        if result is not None:
            say(f"and with {', '.join(f'{k}={v}' for k, v in case.env.items())}")
        workdir = tempfile.mkdtemp(prefix="qualify-", dir=_tmp_root(home))
        try:
            this = _Suite(workdir, say, case).run()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if result is None:
            result = this
        else:  # every case must pass; the first one's figures are shown
            named = ", ".join(f"{k}={v}" for k, v in case.env.items())
            result.problems += [f"{named}: {problem}" for problem in this.problems]
            result.passed = result.passed and this.passed
    assert result is not None
    result.extension = extension
    result.device = device
    details = {
        "reference": result.reference,
        "resumed": result.resumed,
        "resumed_from": result.resumed_from,
        "problems": result.problems,
    }
    key = None if extension is None else extensions.key(extension, result.device)
    result.record = record_result(home, versions, result.passed, details, key)
    return result


def default_device() -> str:
    """The device type a program on this machine trains on by default (the Trainer's choice)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def weights_hash(model_dir: str) -> str:
    """Hash of every tensor (file, name, dtype, shape, bytes) of every ``.safetensors`` file in a
    saved model folder: ``model.safetensors``, or a PEFT model's ``adapter_model.safetensors``.

    Read with torch, which knows bfloat16 (numpy does not): the bytes of each tensor as stored,
    its dtype and shape written as numpy writes them (``float32``, ``(2, 3)``)."""
    import torch
    from safetensors.torch import load_file

    names = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    if not names:
        raise FileNotFoundError(f"no .safetensors file in {model_dir}")
    digest = hashlib.sha256()
    for file_name in names:
        tensors = load_file(os.path.join(model_dir, file_name))
        for name in sorted(tensors):
            value = tensors[name]
            dtype = str(value.dtype).removeprefix("torch.")
            digest.update(f"{file_name}:{name}:{dtype}:{tuple(value.shape)}".encode())
            digest.update(value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class _Failed(Exception):
    """The suite cannot go on; the message is the problem reported."""


class _Suite:
    def __init__(self, workdir: str, say: Say, case: Case) -> None:
        self.workdir = workdir
        self.say = say
        self.case = case
        self.source = os.path.join(workdir, "source")
        self.home = os.path.join(workdir, "home")  # the runner's temporary NODUS_HOME
        self.store_url = "file://" + os.path.join(self.home, "store")

    def run(self) -> Result:
        os.makedirs(self.source)
        shutil.copy(QUALIFY_PROGRAM, os.path.join(self.source, "train.py"))
        shutil.copy(QUALIFY_DATA, os.path.join(self.source, "train.txt"))
        if self.case.program == EXTENSION_PROGRAM:
            shutil.copy(QUALIFY_EXTENSIONS_PROGRAM, os.path.join(self.source, EXTENSION_PROGRAM))
        try:
            self.say("uninterrupted reference run (no nodus)")
            reference = self._reference("reference")
            self.say("the same run again: the environment must train deterministically")
            again = self._reference("reference-again")
        except _Failed as failure:
            return Result(False, problems=[str(failure)])
        if again != reference:
            return Result(False, reference, problems=[NOT_DETERMINISTIC])
        run_id = self._accept()
        problems = self._interrupted_run(run_id)
        attempts = self._attempts(run_id)
        result = Result(
            False,
            reference,
            resumed_from=[a["restored_step"] for a in attempts[1:]],
            problems=problems,
            attempts=attempts,
        )
        if not problems:
            result.resumed = self._outputs_hash(run_id)
        if result.resumed and result.resumed != reference:
            problems.append("the resumed run's final weights differ from the uninterrupted run's")
        result.passed = not problems
        return result

    # --- the reference ------------------------------------------------------------------------

    def _reference(self, name: str) -> str:
        copy = os.path.join(self.workdir, name)
        shutil.copytree(self.source, copy)
        log = os.path.join(self.workdir, f"{name}.log")
        with open(log, "wb") as output:
            status = subprocess.run(
                self._command(),
                cwd=copy,
                env={**os.environ, **self._env()},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            ).returncode
        if status != 0:
            raise _Failed(f"the reference run failed:\n{_tail(log)}")
        return weights_hash(os.path.join(copy, "out", "model"))

    # --- the interrupted run --------------------------------------------------------------------

    def _accept(self) -> str:
        from nodus.schemas.sdk import resolve

        workload = resolve(self._workload(), base_dir=self.workdir)
        catalog = Catalog(self.home)
        try:
            return accept(
                catalog, open_run_store(self.store_url), self.store_url, workload, None, self.home
            ).run_id
        finally:
            catalog.close()

    def _workload(self) -> dict[str, Any]:
        # Explicit v1, so a program outside the profile fails loudly instead of running
        # unprepared; `qualifying` (given to the runner below) lifts only the qualification
        # check, which is what is being established here.
        return {
            "name": "qualify",
            "code": os.path.basename(self.source),
            "command": self._command(),
            "integration": protocol.INTEGRATION_HF_TRAINER_V1,
            "outputs": ["out/model"],
            "env": self._env(),
            "continuity": {
                "mode": "checkpointed",
                "resume_on_interruption": True,
                "checkpoint_paths": [protocol.STATE_DIR],
            },
            "execution": {
                "save_every": 1,
                "save_each_epoch": True,
                "max_recoveries": len(HF_QUALIFY_KILL_STEPS) + 1,
                "grace_period": 10,
            },
        }

    def _env(self) -> dict[str, str]:
        """The program's settings, on a GPU with :data:`GPU_DETERMINISM`."""
        deterministic = GPU_DETERMINISM if default_device() != "cpu" else {}
        return {**PROGRAM_ENV, **deterministic, **self.case.env}

    def _command(self) -> list[str]:
        program = self.case.program
        return [*self.case.launcher, program] if self.case.launcher else [sys.executable, program]

    def _interrupted_run(self, run_id: str) -> list[str]:
        """Drive the run to its end while the watcher kills its program; the problems seen."""
        catalog = Catalog(self.home)
        run = catalog.get_run(run_id)
        saved_delay = os.environ.get(protocol.ENV_WRITE_DELAY)
        os.environ[protocol.ENV_WRITE_DELAY] = str(HF_QUALIFY_WRITE_DELAY_S)
        try:
            with open(os.devnull, "w") as terminal:
                runner = Runner(
                    home=self.home,
                    catalog=catalog,
                    store=open_run_store(run.store),
                    run=run,
                    terminal=terminal,
                    qualifying=True,
                )
                watcher = _Killer(self.home, run_id, runner, self.say, self.case.processes)
                watcher.start()
                try:
                    status = runner.drive()
                finally:
                    watcher.stop()
            problems = list(watcher.problems)
            if status != 0:
                problems.append(self._run_failure(catalog, run_id, status))
            problems += self._committed_mid_save(run_id, watcher.mid_save_attempt)
            return problems
        finally:
            _restore_env(protocol.ENV_WRITE_DELAY, saved_delay)
            catalog.close()

    def _run_failure(self, catalog: Catalog, run_id: str, status: int) -> str:
        run = catalog.get_run(run_id)
        attempts = catalog.attempts(run_id, STAGE)
        log = attempts[-1]["log_path"] if attempts else None
        tail = f":\n{_tail(log)}" if log else ""
        return (
            f"the run under hf-trainer-v1 ended {run.phase} (exit status {status}): "
            f"{run.message}{tail}"
        )

    def _committed_mid_save(self, run_id: str, attempt: int | None) -> list[str]:
        """The attempt killed in the middle of its first save must have committed nothing."""
        if attempt is None:
            return []
        store = open_run_store(self.store_url)
        steps = [m.step for m in store.list(run=run_id, stage=STAGE) if m.attempt == attempt]
        if steps:
            return [f"an interrupted save became a committed snapshot (step {steps[0]})"]
        return []

    def _attempts(self, run_id: str) -> list[dict[str, Any]]:
        catalog = Catalog(self.home)
        try:
            rows = catalog.attempts(run_id, STAGE)
        finally:
            catalog.close()
        keys = ("number", "outcome", "detail", "restored_step")
        return [{key: row[key] for key in keys} for row in rows]

    def _outputs_hash(self, run_id: str) -> str:
        """The final weights as the run's outputs snapshot holds them (verified restore)."""
        store = open_run_store(self.store_url)
        outputs = store.list(run=run_id, stage=STAGE, role="outputs")
        target = os.path.join(self.workdir, "outputs")
        store.restore(outputs[-1].id, target)
        return weights_hash(os.path.join(target, "out", "model"))


class _Killer(threading.Thread):
    """SIGKILLs the run's program at the suite's moments, as a crash or an OOM kill would."""

    def __init__(
        self, home: str, run_id: str, runner: Runner, say: Say, processes: int = 1
    ) -> None:
        super().__init__(name="nodus-qualify-kills", daemon=True)
        self.processes = processes
        self.home = home
        self.run_id = run_id
        self.runner = runner
        self.say = say
        self.problems: list[str] = []
        self.mid_save_attempt: int | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            self._kill_all()
        except _Failed as failure:
            self.problems.append(str(failure))
            # End the drive the way a preemption notice does: the program is stopped, not left.
            self.runner.state.notice = signal.SIGTERM

    def stop(self) -> None:
        self._stopped.set()
        self.join()

    def _kill_all(self) -> None:
        steps = HF_QUALIFY_KILL_STEPS
        for number, step in enumerate(steps, start=1):
            whom = self._whom(number)
            self.say(f"attempt {number}: SIGKILL{whom} after the save of step {step}")
            self._wait(number, _saved(step))
            if number == len(steps):
                # Read when the runner starts the next attempt, which this kill causes.
                os.environ[protocol.ENV_WRITE_DELAY] = HOLD_SAVE_S
            self._kill(number)
        number = len(steps) + 1
        self.say(f"attempt {number}: SIGKILL{self._whom(number)} in the middle of a save")
        ws = self._wait(number, _building)
        del os.environ[protocol.ENV_WRITE_DELAY]  # the last attempt saves at full speed
        self._kill(number)
        self.mid_save_attempt = number
        self._check_unpublished(ws)
        self.say("last attempt: recovered from the newest committed snapshot, trains to the end")

    def _wait(self, number: int, ready: Callable[[Workspace], bool]) -> Workspace:
        """Attempt ``number``'s workspace once its program runs and ``ready`` holds for it.

        The working copy is the stage's: until attempt ``number`` runs, it holds what the attempt
        before left there.
        """
        ws = Workspace.of(self.home, self.run_id, STAGE, number)
        deadline = time.monotonic() + WAIT_S
        started = False
        while not (started and ready(ws)):
            started = started or self._pid(number) is not None
            if self._stopped.is_set():
                raise _Failed(f"the run ended before attempt {number} reached its kill point")
            if time.monotonic() > deadline:
                raise _Failed(f"attempt {number} did not reach its kill point in {WAIT_S:.0f} s")
            time.sleep(0.02)
        return ws

    def _pid(self, number: int) -> int | None:
        """The program pid of attempt ``number``; None until it has started."""
        catalog = Catalog(self.home)
        try:
            attempts = catalog.attempts(self.run_id, STAGE)
        finally:
            catalog.close()
        return attempts[number - 1]["pid"] if len(attempts) >= number else None

    def _whom(self, number: int) -> str:
        return f" of rank {self._rank(number)}" if self.processes > 1 else ""

    def _rank(self, number: int) -> int:
        """Rank 1 first, then turns; the mid-save kill hits the last rank, not rank 0, which
        writes the checkpoint: the launcher ends rank 0 in the middle of its save."""
        if number > len(HF_QUALIFY_KILL_STEPS):
            return self.processes - 1
        return number % self.processes

    def _kill(self, number: int) -> None:
        pid = self._pid(number)
        if pid is None:  # _wait saw it run: only a damaged catalog gets here
            raise _Failed(f"attempt {number} has no program pid to kill")
        if self.processes > 1:
            rank = self._rank(number)
            pid = procfs.rank_process(pid, rank)
            if pid is None:
                raise _Failed(f"attempt {number} has no process of rank {rank} to kill")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            raise _Failed(f"the program of attempt {number} ended before it was killed") from None

    def _check_unpublished(self, ws: Workspace) -> None:
        """The half-written checkpoint stayed under tmp/: no folder in state/, no save record."""
        building = _building_steps(ws)
        published = set(protocol.checkpoint_steps(ws.state))
        recorded = {step for step, _ in protocol.numbered_records(ws.control.saves)}
        if building & (published | recorded):
            self.problems.append("an interrupted save became visible in state/")


def _saved(step: int) -> Callable[[Workspace], bool]:
    """Whether the attempt in a workspace has recorded its save of ``step``."""
    return lambda ws: os.path.exists(ws.control.save_record(step))


def _building(ws: Workspace) -> bool:
    return bool(_building_steps(ws))


def _building_steps(ws: Workspace) -> set[int]:
    """Steps whose checkpoint is being built under the control folder's tmp/ now."""
    try:
        names = os.listdir(ws.control.build)
    except FileNotFoundError:
        return set()
    steps = (protocol.building_step(name) for name in names)
    return {step for step in steps if step is not None}


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _tail(path: str, chars: int = 2000) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()[-chars:]
    except OSError:
        return "(no log)"


def _tmp_root(home: str) -> str:
    root = os.path.join(home, "tmp")
    os.makedirs(root, exist_ok=True)
    return root
