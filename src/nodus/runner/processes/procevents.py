"""The kernel's process-events connector: how each process ended, told as it dies.

A worker whose parent reaps it at once (``accelerate launch`` blocks in ``waitpid``) leaves no
zombie to read, but the kernel multicasts a ``PROC_EVENT_EXIT`` with its wait status to every
socket subscribed to the connector (``NETLINK_CONNECTOR``, ``CN_IDX_PROC``) before the parent can
look. Subscribing needs ``CAP_NET_ADMIN`` in the initial user and pid namespaces; elsewhere
:func:`open_events` returns None and the supervisor reads zombies instead (:mod:`.tree`).

The connector reports every process on the machine. Where the kernel can filter (6.6 and
later) the socket asks for non-zero exits only; either way each read takes a bounded number of
datagrams into one reused buffer and keeps only the exits of whole processes.
"""

from __future__ import annotations

import errno
import os
import select
import struct
import time

# ``socket``'s C half, whose socket type this needs: ``socket`` itself builds enums at import,
# milliseconds of every supervisor's start.
from _socket import AF_NETLINK, SO_RCVBUF, SOCK_DGRAM, SOL_SOCKET, socket

_NETLINK_CONNECTOR = 11
_CN_IDX_PROC = _CN_VAL_PROC = 1
_NLMSG_DONE = 3
_MCAST_LISTEN, _MCAST_IGNORE = 1, 2
_EVENT_NONE, _EVENT_EXIT = 0x00000000, 0x80000000
_EVENT_NONZERO_EXIT = 0x20000000  # the kernel's filter: exits with a non-zero status only

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_WHAT = struct.Struct("=I")  # proc_event.what, right after nlmsghdr and cn_msg
_WHAT_AT = _NLMSGHDR.size + _CN_MSG.size
_EXIT = struct.Struct("=iiIIii")  # pid, tgid, exit_code, exit_signal, parent_pid, parent_tgid
_DATA_AT = _WHAT_AT + 16  # what, cpu, timestamp_ns (8-aligned), then the event's data
_ACK = struct.Struct("=I")  # event_data.ack.err of a PROC_EVENT_NONE
_CN_ACK_AT = _NLMSGHDR.size + 12  # cn_msg.ack: the request's ack + 1

_SO_RCVBUFFORCE = 33  # Linux's; past the limit SO_RCVBUF keeps to, with CAP_NET_ADMIN
_RECEIVE_BUFFER = 1 << 20  # room for a burst of exits while the supervisor scans /proc
_ACK_WAIT_S = 0.05  # the kernel answers within the send itself; this covers any lag


class ProcessEvents:
    """A subscribed connector socket; :meth:`exits` reads what is waiting, never blocking."""

    def __init__(self, sock: socket) -> None:
        self.sock = sock
        self._buffer = bytearray(256)

    def fileno(self) -> int:
        return self.sock.fileno()

    def exits(self, limit: int) -> list[tuple[int, int, int]]:
        """Up to ``limit`` datagrams' worth of process exits: ``(pid, wait status, parent)``.

        Thread exits (``pid != tgid``) and every other kind of event are skipped.
        """
        found = []
        view = self._buffer
        for _ in range(limit):
            try:
                size = self.sock.recv_into(view)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno != errno.ENOBUFS:
                    raise
                # The kernel dropped events (some ends are not told here); the socket stays
                # usable: read on.
                continue
            if size < _DATA_AT + _EXIT.size or _WHAT.unpack_from(view, _WHAT_AT)[0] != _EVENT_EXIT:
                continue
            pid, tgid, status, _, _, parent = _EXIT.unpack_from(view, _DATA_AT)
            if pid == tgid:
                found.append((pid, status, parent))
        return found

    def close(self) -> None:
        """Unsubscribe first: older kernels keep building events while a listener is counted."""
        # Not contextlib.suppress: contextlib is not imported here (the supervisor's start).
        try:  # noqa: SIM105
            _send(self.sock, os.getpid(), struct.pack("=I", _MCAST_IGNORE))
        except OSError:
            pass
        self.sock.close()


def open_events() -> ProcessEvents | None:
    """A socket subscribed to process events, or None where this process may not listen."""
    try:
        sock = socket(AF_NETLINK, SOCK_DGRAM, _NETLINK_CONNECTOR)
    except OSError:  # no connector in this kernel
        return None
    try:
        sock.bind((0, _CN_IDX_PROC))
        _enlarge(sock)
        seq = os.getpid()
        _send(sock, seq, struct.pack("=I", _MCAST_LISTEN))
        if not _acknowledged(sock):
            sock.close()
            return None
        # Narrow to non-zero exits (6.6+); an older kernel ignores a request of this size.
        _send(sock, seq + 1, struct.pack("=II", _MCAST_LISTEN, _EVENT_NONZERO_EXIT))
        sock.setblocking(False)
    except OSError:  # EPERM without CAP_NET_ADMIN
        sock.close()
        return None
    return ProcessEvents(sock)


def _send(sock: socket, seq: int, payload: bytes) -> None:
    cn_msg = _CN_MSG.pack(_CN_IDX_PROC, _CN_VAL_PROC, seq, 0, len(payload), 0) + payload
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(cn_msg), _NLMSG_DONE, 0, seq, os.getpid())
    sock.sendto(header + cn_msg, (0, 0))


def _acknowledged(sock: socket) -> bool:
    """True once the kernel acknowledged the request to listen without error.

    The kernel answers nothing at all where it ignores the request (a process outside the
    initial namespaces, whose pids the events would not name); it answers during the send
    itself otherwise, so a short wait tells.
    """
    deadline = time.monotonic() + _ACK_WAIT_S
    buffer = bytearray(256)
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            return False
        size = sock.recv_into(buffer)
        if size < _DATA_AT + _ACK.size or _WHAT.unpack_from(buffer, _WHAT_AT)[0] != _EVENT_NONE:
            continue  # an event that came first
        # The kernel numbers its messages itself (the request's seq is not echoed everywhere);
        # an answer is an event of no kind acknowledging a first request.
        if _ACK.unpack_from(buffer, _CN_ACK_AT)[0] == 1:
            error: int = _ACK.unpack_from(buffer, _DATA_AT)[0]
            return error == 0
    return False


def _enlarge(sock: socket) -> None:
    for option in (_SO_RCVBUFFORCE, SO_RCVBUF):
        try:
            sock.setsockopt(SOL_SOCKET, option, _RECEIVE_BUFFER)
            return
        except OSError:
            continue
