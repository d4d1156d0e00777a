"""The runner ↔ supervisor channel (nodus.runner.processes.messages): length-prefixed frames
over a socket pair arrive whole and in order however the bytes are cut, a gone peer reads as
closed, and closing twice closes one descriptor once."""

from __future__ import annotations

import os
import socket

from nodus.runner.processes.messages import ENDED, START, Channel, Ending, Loss, Start


def _pair() -> tuple[Channel, Channel]:
    ours, theirs = socket.socketpair()
    return Channel(ours.detach()), Channel(theirs.detach())


def test_messages_arrive_whole_and_in_order_however_the_bytes_are_cut():
    runner, supervisor = _pair()
    start = Start(["python", "train.py"], "/work", {"PATH": "/usr/bin", "X": "a\udcffb"}, 60.0)
    assert runner.send({START: start.to_dict()}) and runner.send({"signal": 15})
    assert Start.from_dict(supervisor.receive(1)[START]) == start  # two frames in one read
    assert supervisor.receive(1) == {"signal": 15}
    ending = Ending(-9, oom=True, lost=(Loss(12, "python -u w.py", 11, 9),))
    frame_source, frame_sink = socket.socketpair()
    Channel(frame_source.fileno()).send({ENDED: ending.to_dict()})
    data = frame_sink.recv(1 << 16)
    for cut in (1, 3, len(data) - 1):  # the length, part of the body, all but the last byte
        sink, source = _pair()
        os.write(source.fd, data[:cut])
        assert sink.receive(0) is None and not sink.closed
        os.write(source.fd, data[cut:])
        assert Ending.from_dict(sink.receive(1)[ENDED]) == ending
        sink.close()
        source.close()
    frame_source.close()
    frame_sink.close()
    runner.close()
    supervisor.close()


def test_a_gone_peer_reads_as_closed_and_a_send_to_it_fails():
    runner, supervisor = _pair()
    supervisor.close()
    supervisor.close()  # once: a second close does nothing
    assert runner.receive(1) is None and runner.closed
    assert runner.send({"kill": True}) is False
    runner.close()
