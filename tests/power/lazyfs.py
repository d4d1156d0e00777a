"""LazyFS, the power cut of tests/power and benchmarks/power_cuts.py: build, mount, cut, reboot.

LazyFS is a FUSE file system that keeps what is written in its own cache until the writer
fsyncs it, and drops whatever was never fsynced when told ``lazyfs::clear-cache``: the disk a
power loss leaves. It is built offline from the sources in the shared tools folder next to the
repository (``../shared/tools/lazyfs/build.sh``, in CI as here), once per machine.

A cut: every process using the mount is stopped (SIGSTOP, looked for again until no new one
appears, so none writes on after the others), the cache is cleared, they are killed, the cache
is cleared again (nothing a stopped request finished may outlive the cut), and the mount goes.
:meth:`LazyFS.mount` again is the reboot: the files are what the backing folder holds.

What it does not show: directory operations (``mkdir``, ``rename``, ``link``, ``unlink``) go
straight to the backing folder, so the order of a new folder's parent fsync is checked apart
(tests/store/test_durable_folders.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO.parent / "shared" / "tools" / "lazyfs" / "build.sh"
CONFIG = """\
[faults]
fifo_path = "{fifo}"
[cache]
apply_eviction = false
[cache.simple]
custom_size = "256mb"
[filesystem]
logfile = "{log}"
log_all_operations = false
"""


def unavailable() -> str | None:
    """Why power cuts cannot be tested on this machine, or None when they can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (LazyFS is a FUSE file system)"
    if binary() is None:
        return f"LazyFS is not built and cannot be: {BUILD_SCRIPT} is missing or failed"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian's fuse3) to unmount LazyFS with"
    return None


_BINARY: list[str | None] = []
# LazyFS says on its output when a clear is done; into a file, only line buffering shows it.
_LINE_BUFFERED = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []


def binary() -> str | None:
    """The lazyfs binary: built by the shared script (which reuses an existing build)."""
    if not _BINARY:
        found = None
        if BUILD_SCRIPT.exists():
            try:
                done = subprocess.run(
                    ["sh", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=900
                )
            except (OSError, subprocess.TimeoutExpired):
                done = None
            lines = done.stdout.strip().splitlines() if done and done.returncode == 0 else []
            if lines and os.access(lines[-1], os.X_OK):
                found = lines[-1]
        _BINARY.append(found)
    return _BINARY[0]


class LazyFS:
    """A LazyFS mount at ``mount`` over the backing folder ``backing``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.backing = work / "disk"
        self.mount_point = work / "mnt"
        self.fifo = work / "faults.fifo"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount_point.mkdir(parents=True, exist_ok=True)
        self.config = work / "lazyfs.toml"
        self.config.write_text(CONFIG.format(fifo=self.fifo, log=work / "lazyfs.log"))
        self._process: subprocess.Popen | None = None

    def mount(self) -> Path:
        """Mount (the first boot, or the reboot after a cut); the mount point."""
        lazyfs = binary()
        assert lazyfs is not None, unavailable()
        if self.fifo.exists():
            self.fifo.unlink()  # LazyFS makes its own
        with open(self.work / "lazyfs.out", "ab") as log:
            self._process = subprocess.Popen(
                [
                    *_LINE_BUFFERED,
                    lazyfs,
                    str(self.mount_point),
                    # relative: LazyFS takes a config path holding "-o" (as pytest's
                    # /tmp/pytest-of-root/... does) for an option and ignores it
                    "--config-path",
                    self.config.name,
                    "-o",
                    "allow_other",
                    "-o",
                    "modules=subdir",
                    "-o",
                    f"subdir={self.backing}",
                    "-f",
                ],
                cwd=self.work,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while not (os.path.ismount(self.mount_point) and self.fifo.exists()):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"LazyFS did not mount: see {self.work / 'lazyfs.out'}")
            time.sleep(0.02)
        return self.mount_point

    def cut(self, spare: tuple[int, ...] = ()) -> list[int]:
        """The power cut: every process using the mount (but ``spare``) stopped, the unsynced
        data dropped, the processes killed, the file system unmounted. Their pids."""
        stopped: list[int] = []
        while True:  # a process may start another while the first ones are being stopped
            found = [p for p in users(self.mount_point) if p not in stopped and p not in spare]
            if not found:
                break
            for pid in found:
                _signal(pid, signal.SIGSTOP)
            stopped += found
        self._clear()
        for pid in stopped:
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in stopped) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._clear()
        self.unmount()
        return stopped

    def unmount(self) -> None:
        if self._process is None:
            return
        # A killed process's files may take a moment to be released: a few tries, then lazily.
        for args in (["-u"], ["-u"], ["-u"], ["-u", "-z"]):
            done = subprocess.run(
                ["fusermount3", *args, str(self.mount_point)], capture_output=True, text=True
            )
            if done.returncode == 0:
                break
            time.sleep(0.2)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def _clear(self) -> None:
        # LazyFS answers nothing: its output says when the cache is gone.
        log = self.work / "lazyfs.out"
        want = _count(log) + 1
        with open(self.fifo, "w") as fifo:
            fifo.write("lazyfs::clear-cache\n")
        deadline = time.monotonic() + 30
        while _count(log) < want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"LazyFS did not clear its cache: see {log}")
            time.sleep(0.005)


def _count(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count("cache is cleared")
    except FileNotFoundError:
        return 0


def users(mount: Path) -> list[int]:
    """Pids of the processes whose working folder, root, executable or any open file lies
    under ``mount``, or whose environment names it (a process between two files), but this
    one."""
    prefix = str(mount)
    marker = os.fsencode(prefix)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        base = f"/proc/{name}"
        try:
            if _state(base) == "Z":
                continue
            links = [os.readlink(f"{base}/cwd")]
            links += [os.readlink(f"{base}/fd/{fd}") for fd in _listdir(f"{base}/fd")]
            with open(f"{base}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if any(link == prefix or link.startswith(prefix + "/") for link in links) or (
            marker in environ
        ):
            found.append(int(name))
    return found


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _state(base: str) -> str:
    with open(f"{base}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    try:
        return _state(f"/proc/{pid}") != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
