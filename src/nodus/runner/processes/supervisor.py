"""The per-attempt supervisor: the parent of a stage program and of everything it starts.

    python -I -S -c "...; supervisor.boot(argv)" PACKAGE_ROOT FD RUNNER_PID

The runner starts one per attempt as the attempt begins (:func:`.stage_process.spawn_supervisor`,
which says why the interpreter runs without ``site``) and talks to it over the socket ``FD``
(:mod:`.messages`); the supervisor starts the program when asked.

It marks itself child-subreaper, so every process below the program stays below it, a double
fork + ``setsid`` included, and it is told of the runner's death (PDEATHSIG SIGTERM, and the
socket's end of file). When the program ends, when the runner asks, and when the runner is
gone, it stops the *whole* tree: SIGTERM (and SIGCONT, so a stopped process can act on it) to
every process, SIGKILL to whatever is left after the grace period; it reaps everything and only
then reports and exits. The program's output never passes through it: the program writes
straight into the pipe the runner reads.

While the program runs it watches the tree (:mod:`.tree`) for processes that die of
a signal nodus did not send: a worker killed under a launcher is how an interruption looks from
outside ``torchrun``. Where it may, it listens to the kernel's process events
(:mod:`.procevents`), which tell every member's wait status even when its parent reaps it at
once (``accelerate launch``); elsewhere it reads the member's zombie (:mod:`.tree`).
"""

from __future__ import annotations

import os
import select
import sys
import time

from nodus.runner.processes import procevents, procfs
from nodus.runner.processes.messages import (
    CANNOT_START,
    ENDED,
    KILL,
    PROCESS_EVENTS,
    PROCESS_STATUS,
    SIGNAL,
    START,
    STARTED,
    CannotStart,
    Channel,
    Ending,
    Loss,
    Start,
)
from nodus.runner.processes.tree import Member, Tree

# This interpreter imports only what is built in or light (``python -X importtime`` on the
# supervisor's modules shows it): ``signal`` builds enums at import, so its C half is used
# here, with the same functions and numbers; :mod:`.messages` says what the rest would cost.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from types import FrameType
else:
    import _signal as signal

# Tunables of the supervisor, here rather than in nodus.schemas.defaults: every attempt starts a
# supervisor, and an interpreter that imports neither the schemas nor the protocol is ready
# sooner (the start of the program waits on it).
TREE_SCAN_S = 0.2
"""How often an attempt's supervisor looks for new processes in its tree (each one's end it
sees at once); longer where one look at ``/proc`` costs more than 2 % of this."""

STOP_SCAN_S = 0.05
"""While an attempt's tree is being stopped, how often its supervisor signals what is left."""

LAUNCHER_EXIT_WINDOW_S = 60.0
"""A launcher (``torchrun``, ``sh -c``) that exits non-zero at most this long after a process of
its tree was killed by a signal nodus did not send is an interruption. A kill long before (a
``multiprocessing.Pool`` ending its workers) did not make it exit."""

_SCAN_BUDGET = 50
"""A look at /proc may cost at most 1/_SCAN_BUDGET of the time between looks (2 % of a core)."""

_LOSSES_KEPT = 16

_EVENTS_PER_TURN = 256
"""Process events read per turn at most: a flood from the rest of the machine cannot starve the
program's requests and stop deadlines, and each turn's reads stay a few hundred microseconds."""

_AWAITED_KEPT = 64


class Program:
    """The program's process (the supervisor's child; its group bears its pid)."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None


class Supervisor:
    """One attempt's program and its tree, from start until every process is reaped."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.tree = Tree(os.getpid())
        self.grace = 0.0  # the stage's grace_period comes with the start; no program before
        self.program: Program | None = None
        self.status: int | None = None  # the program's, once reaped
        self.ended_at: float | None = None
        self.oom = False
        self.lost: list[tuple[float, Loss]] = []  # (when it was seen, what)
        self.vanished: list[tuple[float, Loss]] = []
        self.sent: set[int] = set()  # every signal nodus sent into the tree: never evidence
        self.kill_at: float | None = None  # set once the tree is being stopped
        self.asked_to_stop = False
        self.childless = False
        self.oom_count = procfs.oom_kills()
        self.scan_every = TREE_SCAN_S
        self.next_scan = 0.0
        self.events: procevents.ProcessEvents | None = None
        # Members that ended already reaped by their parent: their exit event may still come.
        self.awaited: dict[int, Member] = {}

    def serve(self) -> int:
        wakeup = self._catch_signals()
        request = self.channel.receive(None)
        if request is None or self.asked_to_stop:
            return 0
        if not self._start(Start.from_dict(request[START])):
            return 0
        try:
            while not (self.status is not None and self.childless):
                self._turn(wakeup)
        except BaseException:
            self._signal_tree(signal.SIGKILL)  # never leave the tree behind, even on a bug
            raise
        finally:
            self._close_events()
        _let_output_go()  # the tree is gone: the runner's reader sees the end now, not at exit
        self.channel.send({ENDED: self._ending().to_dict()})
        self.tree.close()
        return 0

    # --- the loop -------------------------------------------------------------------------

    def _turn(self, wakeup: int) -> None:
        poller = select.poll()
        listened = [wakeup, *self.tree.pidfds()]
        if not self.channel.closed:  # a closed socket would read as ready forever
            listened.append(self.channel.fileno())
        if self.events is not None:
            listened.append(self.events.fileno())
        for fd in listened:
            poller.register(fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(self._timeout() * 1000)}
        if self.events is not None and self.events.fileno() in ready:
            self._take_exit_events()  # first: an exact status beats a zombie read
        self._take_member_ends(ready)
        if wakeup in ready:
            _drain(wakeup)
        if self.channel.fileno() in ready:
            self._take_requests()
        if self.asked_to_stop:  # PDEATHSIG: the runner is gone
            self._stop(self.grace)
        self._reap()
        if not (self.status is not None and self.childless):  # else the last turn: none left
            self._look_and_enforce()

    def _look_and_enforce(self) -> None:
        """The tree's scan when due, and the SIGKILL once the stop's grace is over."""
        now = time.monotonic()
        if now >= self.next_scan:
            self._scan(now)
        if self.kill_at is not None and now >= self.kill_at:
            self._signal_tree(signal.SIGKILL)

    def _timeout(self) -> float:
        now = time.monotonic()
        due = self.next_scan
        if self.kill_at is not None and self.kill_at > now:
            due = min(due, self.kill_at)
        return max(due - now, 0)

    def _scan(self, now: float) -> None:
        self.tree.scan()
        cost = time.monotonic() - now
        if self.kill_at is not None:
            self.scan_every = STOP_SCAN_S
        else:
            self.scan_every = max(TREE_SCAN_S, _SCAN_BUDGET * cost)
        self.next_scan = now + self.scan_every

    # --- start, requests, stopping --------------------------------------------------------

    def _start(self, spec: Start) -> bool:
        self.grace = spec.grace
        self.events = procevents.open_events()  # before the program: no exit goes untold
        try:
            pid = start_program(spec)
        except OSError as error:
            self._close_events()
            self.channel.send({CANNOT_START: _cannot_start(error).to_dict()})
            return False
        self.program = Program(pid)
        # Told first: the runner's bookkeeping of the start need not wait for a look at /proc
        # (the program is its group's leader, so a signal forwarded meanwhile reaches it).
        self.channel.send({STARTED: self.program.pid})
        self.tree.scan()
        return True

    def _take_requests(self) -> None:
        while (request := self.channel.receive(0)) is not None:
            if SIGNAL in request:
                self._forward(int(request[SIGNAL]))
            elif request.get(KILL):
                self._stop(0)
        if self.channel.closed:  # the runner is gone: nobody will capture what follows
            self._stop(self.grace)

    def _forward(self, signum: int) -> None:
        self.sent.add(signum)
        assert self.program is not None
        _signal_group(self.program.pid, signum)

    def _stop(self, grace: float) -> None:
        """End the whole tree: SIGTERM now, SIGKILL once ``grace`` seconds have passed."""
        deadline = time.monotonic() + grace
        if self.kill_at is not None and self.kill_at <= deadline:
            return
        first = self.kill_at is None
        self.kill_at = deadline
        self.next_scan = time.monotonic()
        if first and grace > 0:
            self.tree.scan()
            self._signal_tree(signal.SIGTERM)
            self._signal_tree(signal.SIGCONT)

    def _signal_tree(self, signum: int) -> None:
        self.sent.add(signum)
        self.tree.signal_all(signum)
        if self.program is not None:  # group members born since the last scan
            _signal_group(self.program.pid, signum)

    def _asked(self, _signum: int, _frame: FrameType | None) -> None:
        self.asked_to_stop = True

    def _catch_signals(self) -> int:
        """Stop requests by signal wake the loop through a pipe (the handler only sets a flag)."""
        read, write = os.pipe()
        for fd in (read, write):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, self._asked)
        return read

    # --- ends -----------------------------------------------------------------------------

    def _reap(self) -> None:
        """Reap every child that ended, the program last.

        A worker and the launcher it made exit end within an instant of each other, and the
        worker's end is what makes the launcher's exit an interruption: whatever ended by the
        time the program is reaped is taken in first.
        """
        reaped = []
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.childless = True
                break
            if pid == 0:
                self.childless = False
                break
            reaped.append((pid, raw))
        assert self.program is not None
        program_pid = self.program.pid
        reaped.sort(key=lambda ended: ended[0] == program_pid)
        for pid, raw in reaped:
            member = self.tree.forget(pid)
            if pid == program_pid:
                self._take_exit_events()
                self._take_member_ends(self._ended_pidfds())
                self._program_ended(raw)
            else:
                self._record(pid, member, raw)

    def _take_member_ends(self, ready: set[int]) -> None:
        for fd, member in self.tree.pidfds().items():
            if fd in ready:
                self._member_ended(member)

    def _ended_pidfds(self) -> set[int]:
        """The members that have ended by now, without waiting."""
        poller = select.poll()
        for fd in self.tree.pidfds():
            poller.register(fd, select.POLLIN)
        return {fd for fd, _ in poller.poll(0)}

    def _member_ended(self, member: Member) -> None:
        status = self.tree.ended(member)
        if member.pid in self.tree.members:
            return  # re-parented to the supervisor meanwhile: waitpid tells how it ended
        if status is None and self.events is not None:
            self._await(member)
        self._record(member.pid, member, status)

    def _take_exit_events(self) -> None:
        """Record the members whose exit the kernel reported (see :mod:`.procevents`)."""
        if self.events is None:
            return
        for pid, raw, parent in self.events.exits(_EVENTS_PER_TURN):
            if parent == self.tree.root:
                continue  # the supervisor's own child: waitpid tells, and reaps it
            member = self.tree.forget(pid) or self.awaited.pop(pid, None)
            if member is not None:
                self._record(pid, member, raw, PROCESS_EVENTS)

    def _await(self, member: Member) -> None:
        """Its parent reaped it before the zombie could be read; its exit event tells."""
        self.awaited[member.pid] = member
        while len(self.awaited) > _AWAITED_KEPT:
            del self.awaited[next(iter(self.awaited))]

    def _close_events(self) -> None:
        if self.events is not None:
            self.events.close()
            self.events = None

    def _program_ended(self, raw: int) -> None:
        assert self.program is not None
        self.status = self.program.returncode = os.waitstatus_to_exitcode(raw)
        self.ended_at = time.monotonic()
        self.oom = self.status == -signal.SIGKILL and self._oom_counted()
        if not self.childless:  # a subreaper without children has no tree left to stop
            self._stop(self.grace)

    def _record(
        self, pid: int, member: Member | None, raw: int | None, evidence: str = PROCESS_STATUS
    ) -> None:
        """A member's end: evidence of an interruption while the program still runs."""
        if self.status is not None:
            return  # the program ended first: nothing after it made it end
        command = member.command if member else ""
        parent = member.parent if member else 0
        if raw is None:
            if self.program is not None and parent == self.program.pid:
                self.vanished = _remember(self.vanished, Loss(pid, command, parent, 0))
            return
        if os.WIFSIGNALED(raw) and os.WTERMSIG(raw) not in self.sent:
            signum = os.WTERMSIG(raw)
            oom = signum == signal.SIGKILL and self._oom_counted()
            loss = Loss(pid, command, parent, signum, oom, evidence)
            self.lost = _remember(self.lost, loss)

    def _oom_counted(self) -> bool:
        """True if the kernel counted an OOM kill since the last look."""
        count = procfs.oom_kills()
        rose = count is not None and self.oom_count is not None and count > self.oom_count
        self.oom_count = count
        return rose

    def _ending(self) -> Ending:
        """What the runner is told; a loss long before the program ended did not end it."""
        assert self.status is not None and self.ended_at is not None
        since = self.ended_at - LAUNCHER_EXIT_WINDOW_S
        lost = tuple(loss for at, loss in self.lost if at >= since)
        vanished = tuple(loss for at, loss in self.vanished if at >= since)
        return Ending(self.status, self.oom, lost, vanished)


def start_program(spec: Start) -> int:
    """Fork and exec the program; its pid, or the OSError its ``chdir`` or ``exec`` met.

    What ``subprocess.Popen`` would do with ``start_new_session`` and a ``preexec_fn``, without
    importing it (the supervisor's start is on the path of every attempt's). The child: its own
    session and group (the runner's stop requests go to it), SIGKILL when the supervisor dies,
    standard input from /dev/null, SIGPIPE and SIGXFSZ back to their defaults (this interpreter
    ignores them, and an ignored signal stays ignored across ``exec``), the command looked up
    on the PATH of its own environment. Every descriptor but 0-2 is close-on-exec here (the
    interpreter opens them so), so the program inherits only its output pipe.
    """
    parent = os.getpid()
    report, told = os.pipe()  # close-on-exec: an exec that succeeds closes it unwritten
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, which ends in exec or _exit
        try:
            os.close(report)
            _become_program(spec, parent)
        except OSError as error:
            os.write(told, f"{error.errno or 0}:{error.strerror or error}".encode())
        except BaseException as error:  # a child must never return into the supervisor
            os.write(told, f"0:{error}".encode())
        finally:
            os._exit(127)
    os.close(told)
    failure = _read_all(report)
    if not failure:
        return pid
    os.waitpid(pid, 0)
    number, _, message = failure.decode(errors="replace").partition(":")
    raise OSError(int(number) or None, message)


def _become_program(spec: Start, parent: int) -> None:
    os.setsid()
    procfs.die_with_parent(parent, signal.SIGKILL)()
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(spec.cwd)
    os.execvpe(spec.command[0], spec.command, spec.env)  # its PATH is where it is looked up


def _signal_group(group: int, signum: int) -> bool:
    """Signal a process group; False once it is gone."""
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _read_all(fd: int) -> bytes:
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    return data


def _cannot_start(error: OSError) -> CannotStart:
    """Why the program could not start, as the runner is told (an errno where there is one)."""
    return CannotStart(error.errno or 0, error.strerror or str(error))


def _remember(kept: list[tuple[float, Loss]], loss: Loss) -> list[tuple[float, Loss]]:
    """Add ``loss``; forget what is too old to have ended the program (a long run sees many)."""
    now = time.monotonic()
    recent = [(at, old) for at, old in kept if at >= now - LAUNCHER_EXIT_WINDOW_S]
    return [*recent, (now, loss)][-_LOSSES_KEPT:]


def _let_output_go() -> None:
    """Close this process's end of the program's output pipe (stdout and stderr)."""
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def boot(argv: list[str]) -> None:
    """The supervisor's process, as :func:`.stage_process.spawn_supervisor` starts it: serve,
    then leave without the interpreter's teardown, which the runner waits for (the end of this
    process's output) before the next attempt can start. The tree is reaped and reported."""
    status = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def main(argv: list[str] | None = None) -> int:
    fd, runner = (int(arg) for arg in (argv if argv is not None else sys.argv[1:])[:2])
    os.set_inheritable(fd, False)
    # SIGTERM when the runner's thread that started it ends; exits at once if it already did.
    procfs.die_with_parent(runner, signal.SIGTERM)()
    procfs.become_subreaper()
    channel = Channel(fd)
    return Supervisor(channel).serve()


if __name__ == "__main__":
    boot(sys.argv[1:])
