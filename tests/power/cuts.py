"""Power cuts of real nodus commands on LazyFS, and what must hold after each reboot.

A :class:`Box` is a machine whose disk is a LazyFS mount: ``$NODUS_HOME`` (the catalog, the
default store and the work folders) lies on it, the project folder beside it. Its
:meth:`Box.round` cuts the power five times, each at a random moment of a command:

1. ``nodus run FILE --key K`` once a snapshot of it has committed;
2. the same run continued (``run --key K``) just after a new commit, while rotation deletes the
   older snapshot's state;
   then ``run --key K`` runs to the end and must end as an uninterrupted run does;
3. ``nodus snapshots download`` of the run's newest snapshot;
4. ``nodus gc`` expiring the finished run's snapshots (``retention_days = 0``);
5. ``nodus runs delete K``.

Each command's output is read as a person would (stderr on a terminal, so committed snapshots
are said too): what it acknowledged before the cut goes into a :class:`Ledger`. After each cut
the machine reboots (LazyFS mounted again) and :meth:`Box.check` asks: every acknowledged run is
there with its acknowledged phase, every acknowledged deletion stayed done, every acknowledged
snapshot is there or its deletion is recorded, every acknowledged expiry has its event, every
acknowledged download is whole, the store verifies (``nodus store verify``) and every committed
snapshot restores. Then the interrupted command runs again to its end.

Waiting is on events (a manifest in the store); only the moment of each cut is random.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from lazyfs import LazyFS

from nodus.testing.counter import expected_value

STEPS, SAVE_EVERY, SLEEP, STATE_BYTES = 60, 5, 0.03, 256 * 1024
NODUS = [sys.executable, "-m", "nodus"]
FAST = {"NODUS_SETTLE_S": "0.2", "NODUS_LEASE_SETTLE_S": "0.2"}
WAIT_S = 120.0
CUTS = ("run", "rotation", "download", "gc", "delete")

_ACCEPTED = re.compile(r"accepted (run_[0-9a-f]+)")
_PHASE = re.compile(r"nodus: (run_[0-9a-f]+) (SUCCEEDED|FAILED|CANCELLED|INTERRUPTED|PAUSED)\b")
_SNAPSHOT = re.compile(r"snapshot of step \d+ committed \((ckpt_[0-9a-f]+)\)")
_DELETED = re.compile(r"deleted (run_[0-9a-f]+):")
_EXPIRED = re.compile(r"expired: (run_[0-9a-f]+) step \d+ (\w+) \((ckpt_[0-9a-f]+)\)")
_DOWNLOADED = re.compile(r"wrote \d+ file\(s\) of (ckpt_[0-9a-f]+) \(\w+\) into (.+), verified")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclasses.dataclass
class Ledger:
    """What the commands acknowledged, across every cut and reboot of one box."""

    runs: dict[str, str] = dataclasses.field(default_factory=dict)  # id -> phase ("" accepted)
    deleted: set[str] = dataclasses.field(default_factory=set)
    snapshots: dict[str, str] = dataclasses.field(default_factory=dict)  # snapshot -> run
    expired: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)  # run, snap, kind
    downloads: dict[str, str] = dataclasses.field(default_factory=dict)  # folder -> snapshot

    def read(self, text: str, run: str | None = None) -> None:
        """Take in what a command's output acknowledged (``run``: the run it drove)."""
        for run_id in _ACCEPTED.findall(text):
            self.runs.setdefault(run_id, "")
        for run_id, phase in _PHASE.findall(text):
            self.runs[run_id] = phase
        for snapshot in _SNAPSHOT.findall(text):
            if run is not None:
                self.snapshots[snapshot] = run
        for run_id in _DELETED.findall(text):
            self.deleted.add(run_id)
        for run_id, kind, snapshot in _EXPIRED.findall(text):
            self.expired.add((run_id, snapshot, kind))
        for snapshot, folder in _DOWNLOADED.findall(text):
            self.downloads[folder.strip()] = snapshot


class Command:
    """A nodus command in the background: stdout through a pipe, stderr on a terminal (as a
    person sees it, committed snapshots said), both gathered as it runs."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*NODUS, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self._chunks: list[bytes] = []
        assert self.proc.stdout is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout.fileno(),), daemon=True),
            threading.Thread(target=self._read, args=(master, True), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, fd: int, close: bool = False) -> None:
        try:
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the terminal's last writer is gone
                    break
                if not chunk:
                    break
                self._chunks.append(chunk)
        finally:
            if close:
                os.close(fd)

    def wait(self, timeout: float = WAIT_S) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=10)
        self.ended = time.monotonic()
        return code

    @property
    def text(self) -> str:
        raw = b"".join(self._chunks).decode(errors="replace")
        return _ESCAPES.sub("", raw).replace("\r", "\n")


class Box:
    """One machine with its disk on LazyFS; :meth:`round` makes five cuts."""

    def __init__(self, work: Path, seed: int = 0) -> None:
        self.work = work
        self.rng_seed = seed
        self.rng = random.Random(seed)
        self.fs = LazyFS(work / "lazyfs")
        self.project = work / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        self.scratch = work / "restored"
        self.ledger = Ledger()
        self.counts: Counter[str] = Counter()
        self.problems: list[str] = []
        self.took: dict[str, float] = {}  # a command's wall time when it ran to its end
        self.rounds = 0
        self.file = self.project / "workload.toml"
        command = [
            sys.executable,
            *("-m", "nodus.testing.counter", "--steps", str(STEPS)),
            *("--save-every", str(SAVE_EVERY), "--sleep", str(SLEEP)),
            *("--state-bytes", str(STATE_BYTES)),
        ]
        self.file.write_text(
            f'name = "counter"\ncommand = {json.dumps(command)}\noutputs = ["out"]\n'
            "[execution]\nretention_days = 0\n"
        )
        self.fs.mount()

    @property
    def home(self) -> Path:
        return self.fs.mount_point / "home"

    def env(self) -> dict[str, str]:
        env = dict(os.environ, NODUS_HOME=str(self.home), **FAST)
        # LazyFS implements no statfs (every count is 0): the disk guard is told what the
        # backing disk has free instead, or it would turn periodic saves off.
        disk = os.statvfs(self.fs.backing)
        env["NODUS_FREE_BYTES"] = str(disk.f_bavail * disk.f_frsize)
        env.pop("NODUS_STORE", None)
        return env

    def start(self, *args: str) -> Command:
        return Command(list(args), self.project, self.env())

    def nodus(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*NODUS, *args],
            cwd=self.project,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )

    def close(self) -> None:
        self.fs.unmount()

    # --- the round --------------------------------------------------------------------------

    def round(self) -> None:
        self.rounds += 1
        key = f"k{self.rounds}"
        # 1. the run, at a random moment once a snapshot has committed
        run = self.start("run", str(self.file), "--key", key)
        self._wait_for_commit(run, set())
        self._cut(run, "run", delay=self.rng.uniform(0, STEPS * SLEEP / 2), key=key)
        # 2. the run continued, just after a commit: rotation deletes the older one's state
        before = self._checkpoints()
        run = self.start("run", str(self.file), "--key", key)
        if self._wait_for_commit(run, before, ended_ok=True):
            self._cut(run, "rotation", delay=self.rng.uniform(0, 0.1), key=key)
        else:  # the first cut came after the run's end (a loaded machine): nothing to cut
            self.ledger.read(run.text)
            self.counts["rotation cuts missed: the run had ended"] += 1
        # ... and to its end, as an uninterrupted run ends
        run_id = self._finish(key)
        newest = self._newest_checkpoint(run_id)
        # 3. a download of its newest snapshot
        target = self.fs.mount_point / "downloads" / f"{key}-{newest}"
        args = ("snapshots", "download", newest, "--artifact", "resumable", "--to", str(target))
        self._cut(self.start(*args), "download", delay=self._moment("download"))
        self._again("download", *args[:-1], str(target) + "-again")
        # 4. gc: the finished run's snapshots expire at once
        self._cut(self.start("gc"), "gc", delay=self._moment("gc"))
        self._again("gc", "gc")
        # 5. the run deleted
        delete = self.start("runs", "delete", key)
        self._cut(delete, "delete", delay=self._moment("delete"), deleting=run_id)
        if run_id not in self.ledger.deleted:  # its "deleted" line is the acknowledgement
            self._again("delete", "runs", "delete", key, absent_ok=True)
        self.check()

    def _moment(self, kind: str) -> float:
        """A random moment of a command's life: up to its last uninterrupted wall time."""
        return self.rng.uniform(0, self.took.get(kind, 1.0))

    def _cut(
        self,
        command: Command,
        kind: str,
        delay: float,
        key: str | None = None,
        deleting: str | None = None,
    ) -> None:
        """Cut at ``delay`` into ``command``, reboot, check. ``deleting``: the run a
        ``runs delete`` was removing, which may be gone before the command said so."""
        time.sleep(delay)
        finished = command.proc.poll() is not None
        self.fs.cut(spare=(os.getpid(),))
        command.wait()
        run = None
        if key is not None:
            found = _ACCEPTED.findall(command.text) or re.findall(r"(run_[0-9a-f]+)", command.text)
            run = found[0] if found else None
        self.ledger.read(command.text, run)
        self.counts["cuts"] += 1
        self.counts[f"cuts:{kind}"] += 1
        if finished:
            self.counts["cuts after the command ended"] += 1
        self.fs.mount()  # the reboot
        if deleting is not None and deleting not in self.ledger.deleted:
            gone = self.nodus("runs", "get", deleting, "--json")
            if gone.returncode != 0 and "no run with id or key" in gone.stderr:
                self.ledger.deleted.add(deleting)  # done as asked, the cut came before the line
                self.counts["deletions done, not yet said at the cut"] += 1
        self.check()

    def _again(self, kind: str, *args: str, absent_ok: bool = False) -> None:
        """The interrupted command run again, to its end."""
        command = self.start(*args)
        code = command.wait()
        self.ledger.read(command.text)
        if code != 0 and not (absent_ok and "no run with id or key" in command.text):
            said = f"{' '.join(args)} after the reboot exited {code}:\n{command.text}"
            self.problems.append(said)
        else:
            self.took[kind] = command.ended - command.started

    def _finish(self, key: str) -> str:
        """``run --key`` to its end: SUCCEEDED, with an uninterrupted run's result."""
        command = self.start("run", str(self.file), "--key", key)
        code = command.wait()
        found = re.findall(r"(run_[0-9a-f]+)", command.text)
        self.ledger.read(command.text, found[0] if found else None)
        if code != 0:
            self.problems.append(f"run --key {key} after the cuts exited {code}:\n{command.text}")
            raise AssertionError(self.problems[-1])
        run_id = json.loads(self.nodus("runs", "get", key, "--json").stdout)["id"]
        result = self._result(run_id)
        if result != {"steps": STEPS, "value": expected_value(STEPS)}:
            self.problems.append(f"{run_id} ended with {result}, not an uninterrupted run's")
        self.counts["runs ended equal to an uninterrupted run"] += 1
        return run_id

    # --- waiting on the store ---------------------------------------------------------------

    def _checkpoints(self) -> set[str]:
        try:
            names = os.listdir(self.home / "store" / "snapshots")
        except FileNotFoundError:
            return set()
        return {n for n in names if n.startswith("ckpt_") and n.endswith(".json")}

    def _wait_for_commit(self, command: Command, before: set[str], ended_ok: bool = False) -> bool:
        """Wait until a checkpoint not in ``before`` is committed; False when ``command``
        ended first and ``ended_ok`` (a run that had already finished)."""
        deadline = time.monotonic() + WAIT_S
        while not self._checkpoints() - before:
            ended = command.proc.poll() is not None
            if ended and ended_ok and command.wait() == 0:
                return False
            if ended or time.monotonic() > deadline:
                raise AssertionError(f"no snapshot committed; the command said:\n{command.text}")
            time.sleep(0.01)
        return True

    def _store(self):
        from nodus.store import open_store

        return open_store("file://" + str(self.home / "store"))

    def _newest_checkpoint(self, run_id: str) -> str:
        return self._store().list(run=run_id)[-1].id

    def _result(self, run_id: str) -> dict:
        store = self._store()
        outputs = store.list(run=run_id, role="outputs")
        target = self._fresh(f"outputs-{run_id}")
        store.restore(outputs[-1].id, str(target))
        return json.loads((target / "out" / "result.json").read_text())

    def _fresh(self, name: str) -> Path:
        folder = self.scratch / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        return folder

    # --- after each reboot ------------------------------------------------------------------

    def check(self) -> None:
        """Everything acknowledged is there; the store verifies and every snapshot restores."""
        problems = _Unique(self.problems)
        listed = self.nodus("runs", "list", "--json")
        if listed.returncode != 0:
            problems.append(f"runs list after the reboot: {listed.stderr}")
            return
        phases = {run["id"]: run["phase"] for run in json.loads(listed.stdout)}
        events = self._check_runs(phases, problems)
        store = self._store()
        manifests = store.list(role=None)
        for run_id in self.ledger.deleted:
            if any(m.run == run_id for m in manifests):
                problems.append(f"lost: the deletion of {run_id} (its snapshots are back)")
        self._check_snapshots(store, manifests, events, problems)
        self._check_expiries(events, problems)
        for folder, snapshot in self.ledger.downloads.items():
            self.counts["acknowledged downloads checked"] += 1
            if not _whole_download(Path(folder)):
                problems.append(f"lost: the download of {snapshot} into {folder}")
        verify = self.nodus("store", "verify")
        if verify.returncode != 0:
            problems.append(f"store verify after the reboot:\n{verify.stdout}{verify.stderr}")
        self._check_restores(store, manifests, problems)

    def _check_runs(self, phases: dict[str, str], problems: _Unique) -> dict[str, list[dict]]:
        """Each acknowledged run is listed in its acknowledged phase, each deleted one is gone;
        the events of the runs kept."""
        events: dict[str, list[dict]] = {}
        for run_id, phase in self.ledger.runs.items():
            if run_id in self.ledger.deleted:
                continue
            self.counts["runs checked"] += 1
            if run_id not in phases:
                problems.append(f"lost: run {run_id} (acknowledged {phase or 'accepted'})")
                continue
            if phase:
                self.counts["phases checked"] += 1
                if phases[run_id] != phase:
                    problems.append(f"lost: {run_id} acknowledged {phase}, now {phases[run_id]}")
            events[run_id] = self._events(run_id)
        for run_id in self.ledger.deleted:
            self.counts["deletions checked"] += 1
            if run_id in phases:
                problems.append(f"lost: the deletion of {run_id} (it is back as {phases[run_id]})")
        return events

    def _check_snapshots(
        self, store, manifests: list, events: dict[str, list[dict]], problems: _Unique
    ) -> None:
        """Each acknowledged snapshot is committed, pending deletion, or deleted as recorded."""
        present = {m.id for m in manifests}
        pending = {snapshot for snapshot, _kind in store.pending_deletions()}
        for snapshot, run_id in self.ledger.snapshots.items():
            if run_id in self.ledger.deleted:
                continue
            self.counts["acknowledged snapshots checked"] += 1
            deleted = any(
                e["type"] == "snapshot_kind_deleted" and e.get("snapshot") == snapshot
                for e in events.get(run_id, ())
            )
            if snapshot in present or snapshot in pending or deleted:
                continue
            if not (self.home / "store" / "snapshots" / f"{snapshot}.json").exists():
                # Removed by nodus itself (LazyFS neither undoes nor makes an unlink): retention
                # deletes, then records the event, and the cut fell between the two.
                self.counts["snapshots deleted by retention, their event not yet written"] += 1
                continue
            problems.append(f"lost: snapshot {snapshot} of {run_id}, committed as said")

    def _check_expiries(self, events: dict[str, list[dict]], problems: _Unique) -> None:
        """Each acknowledged expiry of gc has its event."""
        for run_id, snapshot, kind in self.ledger.expired:
            if run_id in self.ledger.deleted:
                continue
            self.counts["acknowledged expiries checked"] += 1
            if not any(
                e["type"] == "snapshot_kind_deleted"
                and e.get("snapshot") == snapshot
                and e.get("kind") == kind
                for e in events.get(run_id, ())
            ):
                problems.append(f"lost: the event of gc's expiry of {snapshot} {kind} ({run_id})")

    def _check_restores(self, store, manifests: list, problems: _Unique) -> None:
        """Every committed snapshot restores."""
        for manifest in manifests:
            target = self._fresh(f"restore-{manifest.id}")
            try:
                store.restore(manifest.id, str(target))
            except Exception as error:
                problems.append(f"snapshot {manifest.id} does not restore: {error}")
            else:
                self.counts["committed snapshots verified and restored"] += 1
            shutil.rmtree(target, ignore_errors=True)

    def _events(self, run_id: str) -> list[dict]:
        """The run's events as the catalog holds them (read-only, closed again: nothing of
        this process stays open on the mount across a cut)."""
        from nodus.runner.catalog.core import Catalog

        catalog = Catalog(str(self.home), read_only=True)
        try:
            return [{**e["details"], "type": e["type"]} for e in catalog.events(run_id)]
        finally:
            catalog.close()


class _Unique:
    """``list.append`` that keeps each problem once: every check after a loss sees it again."""

    def __init__(self, problems: list[str]) -> None:
        self._problems = problems

    def append(self, problem: str) -> None:
        if problem not in self._problems:
            self._problems.append(problem)


def _whole_download(folder: Path) -> bool:
    """Whether a downloaded resumable checkpoint is there, whole (the counter's state.json
    reads, its weights.bin has the size the counter writes)."""
    states = list(folder.rglob("state.json"))
    weights = list(folder.rglob("weights.bin"))
    try:
        whole = bool(states) and all(json.loads(p.read_text())["value"] for p in states)
    except (OSError, ValueError, KeyError):
        return False
    return whole and all(p.stat().st_size == STATE_BYTES for p in weights) and bool(weights)


def summary(counts: Counter[str], problems: list[str], ledger: Ledger | None = None) -> str:
    """The counts (each check after each reboot counts once), what was acknowledged in all
    (``ledger``) and the losses."""
    lines = [f"{name}: {counts[name]}" for name in sorted(counts)]
    if ledger is not None:
        finished = sum(1 for phase in ledger.runs.values() if phase)
        lines.append(
            f"acknowledged in all: {len(ledger.runs)} runs ({finished} with their final phase), "
            f"{len(ledger.deleted)} deletions, {len(ledger.snapshots)} snapshots, "
            f"{len(ledger.expired)} gc expiries, {len(ledger.downloads)} downloads"
        )
    lines.append(f"lost or broken: {len(problems)}")
    return "\n".join(lines)
