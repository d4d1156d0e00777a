"""Direct I/O for large blobs: copy past the page cache on the store's side, hashing the buffers.

Capture (:func:`direct_copy`): a checkpoint of several GiB copied through the page cache first
fills memory with dirty pages (evicting the training data the program keeps cached) and then
waits for all of them at fsync. Here the reader fills one aligned buffer from the source and
hashes it while writer threads put earlier buffers on disk with ``O_DIRECT``, so reading,
hashing and writing overlap and the fsync that commits the blob has almost nothing left to flush.

Restore (:func:`direct_read_copy`): after a crash the blobs are on disk, not in memory. Reader
threads each fetch a chunk of the blob with ``O_DIRECT`` (one sequential stream reads this disk
at about half the speed of two) and write it into the working copy, which the program is about
to load, through the page cache; the caller's thread hashes the chunks in order meanwhile.

Either way the digest is taken of the very buffer that is written, so it names exactly the bytes
stored or restored. A file system that refuses ``O_DIRECT`` (tmpfs, some network and overlay file
systems) raises :class:`Unsupported` with the sink left empty and neither file position moved;
the caller then copies through the page cache.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

from nodus.protocol import content_hasher

__all__ = ["Unsupported", "direct_copy", "direct_read_copy"]

STORE_DIRECT_CHUNK_BYTES = 64 * 1024 * 1024
STORE_DIRECT_BUFFERS = 4
STORE_DIRECT_THREADS = 3
"""Direct I/O: chunk size, reusable aligned buffers (held for the life of the process once a
large file was copied) and threads writing (capture) or reading (restore) the store's side;
chosen with benchmarks/capture.py on an ext4 virtio disk (3 threads beat 2 by about 8 %)."""

_ALIGN = 4096  # offsets, lengths and buffer addresses of direct I/O are multiples of this


_Pipeline = Callable[[int, int, list[memoryview]], tuple[str, int]]
"""A copy over the borrowed buffers: (source fd, sink fd, buffers) -> (hash, bytes)."""


class Unsupported(Exception):
    """This fast path cannot copy these two files; nothing was written to the sink."""


def direct_copy(source_fd: int, sink_fd: int, chunk: int | None = None) -> tuple[str, int]:
    """Copy ``source_fd`` into the empty ``sink_fd``, writing with ``O_DIRECT`` (capture).

    Returns (xxh3-128, bytes). Neither file's position moves, and the sink's flags are restored.
    """
    return _direct(_write_pipeline, source_fd, sink_fd, sink_fd, chunk)


def direct_read_copy(source_fd: int, sink_fd: int, chunk: int | None = None) -> tuple[str, int]:
    """Copy ``source_fd`` into the empty ``sink_fd``, reading with ``O_DIRECT`` (restore).

    Returns (xxh3-128, bytes). Neither file's position moves, and the source's flags are restored.
    """
    return _direct(_read_pipeline, source_fd, sink_fd, source_fd, chunk)


def _direct(
    pipeline: _Pipeline, source_fd: int, sink_fd: int, direct_fd: int, chunk: int | None
) -> tuple[str, int]:
    """Run ``pipeline`` with ``O_DIRECT`` set on ``direct_fd`` and the shared buffers borrowed."""
    chunk = chunk or STORE_DIRECT_CHUNK_BYTES
    if chunk % _ALIGN or not hasattr(os, "O_DIRECT"):
        raise Unsupported(f"chunk {chunk} is not a multiple of {_ALIGN}, or no O_DIRECT here")
    with _POOL.borrow(chunk, STORE_DIRECT_BUFFERS) as buffers:
        if buffers is None:
            raise Unsupported("the direct-I/O buffers are in use by another copy")
        flags = fcntl.fcntl(direct_fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(direct_fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        except OSError as error:
            raise Unsupported(str(error)) from error
        try:
            return pipeline(source_fd, sink_fd, buffers)
        except _Refused as refused:
            os.ftruncate(sink_fd, 0)
            raise Unsupported(str(refused.__cause__)) from refused.__cause__
        finally:
            fcntl.fcntl(direct_fd, fcntl.F_SETFL, flags)


class _Refused(Exception):
    """A direct read or write was refused as invalid (alignment the file system won't take)."""


def _write_pipeline(source_fd: int, sink_fd: int, buffers: list[memoryview]) -> tuple[str, int]:
    """This thread reads and hashes chunks in order; writer threads write them in any order."""
    free: queue.LifoQueue[memoryview] = queue.LifoQueue()
    _stack(free, buffers)
    jobs: queue.SimpleQueue[tuple[memoryview, int, int] | None] = queue.SimpleQueue()
    failures: list[Exception] = []

    def write() -> None:
        while (job := jobs.get()) is not None:
            view, count, offset = job
            try:
                if not failures:  # after one failure the rest is drained, not written
                    _write_aligned(sink_fd, view, count, offset)
            except Exception as error:  # any failure, or the blob would have a hole
                failures.append(error)
            finally:
                free.put(view)

    expected = -(-os.fstat(source_fd).st_size // len(buffers[0]))  # chunks, if it keeps its size
    writers = _start_threads(write, "nodus-direct-writer", expected)
    digest = content_hasher()
    total = 0
    try:
        while not failures:
            view = free.get()
            count = _fill(source_fd, view, total)
            if count:
                digest.update(view[:count])
                jobs.put((view, count, total))
                total += count
            if count < len(view):
                break  # end of the source
    finally:
        _stop(jobs.put, writers)
    if failures:
        _raise(failures[0])
    os.ftruncate(sink_fd, total)  # drop the zero padding of the last block
    return digest.hexdigest(), total


def _read_pipeline(source_fd: int, sink_fd: int, buffers: list[memoryview]) -> tuple[str, int]:
    """Readers fetch and write chunks in any order; this thread hashes them in order."""
    chunk = len(buffers[0])
    size = os.fstat(source_fd).st_size
    chunks = -(-size // chunk)
    free: queue.LifoQueue[memoryview | None] = queue.LifoQueue()  # None: stop
    _stack(free, buffers)
    ready: dict[int, tuple[memoryview, int] | Exception] = {}
    arrived = threading.Condition()
    claimed = iter(range(chunks))

    def read() -> None:
        while (view := free.get()) is not None:
            # The buffer is taken before the index: whoever holds the lowest unread chunk can
            # always read it, so the in-order consumer never waits on a reader that waits on it.
            with arrived:
                index = next(claimed, None)
            if index is None:
                return
            try:
                offset = index * chunk
                count = _fill_aligned(source_fd, view, offset, min(chunk, size - offset))
                _write_all(sink_fd, view, count, offset)  # in parallel: only hashing is in order
                got: tuple[memoryview, int] | Exception = (view, count)
            except Exception as error:  # handed to the consumer, which would otherwise wait
                got = error
            with arrived:
                ready[index] = got
                arrived.notify_all()

    readers = _start_threads(read, "nodus-direct-reader", chunks)
    digest = content_hasher()
    total = 0
    try:
        for index in range(chunks):
            with arrived:
                while index not in ready:
                    arrived.wait()
                got = ready.pop(index)
            if isinstance(got, Exception):
                _raise(got)
            view, count = got
            digest.update(view[:count])
            total += count
            free.put(view)
            if count < min(chunk, size - index * chunk):
                break  # the blob is shorter than it was a moment ago: the caller's check says so
    finally:
        with arrived:
            claimed = iter(())  # readers claim nothing more
        _stop(free.put, readers)
    return digest.hexdigest(), total


def _stop(put: Callable[[None], None], threads: list[threading.Thread]) -> None:
    """Tell each thread to stop (a None each, through ``put``) and wait for them all."""
    for _ in threads:
        put(None)
    for thread in threads:
        thread.join()


def _stack(
    free: queue.LifoQueue[memoryview] | queue.LifoQueue[memoryview | None],
    buffers: list[memoryview],
) -> None:
    """Free buffers, most recently used first: a small file keeps to memory already touched."""
    for buffer in reversed(buffers):
        free.put(buffer)


def _start_threads(target: Callable[[], None], name: str, chunks: int) -> list[threading.Thread]:
    """Up to ``STORE_DIRECT_THREADS`` threads, one per chunk at most (at least one)."""
    count = max(1, min(STORE_DIRECT_THREADS, chunks))
    threads = [threading.Thread(target=target, name=name, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def _raise(error: Exception) -> NoReturn:
    """Re-raise a worker's failure; an invalid-argument one means direct I/O is refused here."""
    if isinstance(error, OSError) and error.errno == errno.EINVAL:
        raise _Refused() from error
    raise error


def _fill(fd: int, view: memoryview, offset: int) -> int:
    """Read from ``offset`` until ``view`` is full or the file ends; the bytes read."""
    count = 0
    while count < len(view):
        got = os.preadv(fd, [view[count:]], offset + count)
        if not got:
            break
        count += got
    return count


def _fill_aligned(fd: int, view: memoryview, offset: int, wanted: int) -> int:
    """Direct reads of whole blocks from the aligned ``offset``; the first ``wanted`` bytes."""
    limit = -(-wanted // _ALIGN) * _ALIGN
    count = 0
    while count < wanted:
        got = os.preadv(fd, [view[count:limit]], offset + count)
        count += got
        if not got or count % _ALIGN:
            break  # the end of the file: another read would start at an unaligned offset
    return min(count, wanted)


def _write_aligned(fd: int, view: memoryview, count: int, offset: int) -> None:
    padded = -(-count // _ALIGN) * _ALIGN
    if padded != count:
        view[count:padded] = bytes(padded - count)
    _write_all(fd, view, padded, offset)


def _write_all(fd: int, view: memoryview, count: int, offset: int) -> None:
    written = 0
    while written < count:
        written += os.pwrite(fd, view[written:count], offset + written)


class _Pool:
    """Aligned buffers (anonymous maps are page aligned), allocated once and reused.

    One capture uses them at a time; a concurrent one is told to copy through the page cache.
    Allocating per file would cost a first touch of the memory on every capture.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: list[mmap.mmap] = []

    @contextmanager
    def borrow(self, size: int, count: int) -> Iterator[list[memoryview] | None]:
        if not self._lock.acquire(blocking=False):
            yield None
            return
        try:
            if len(self._maps) != count or any(len(m) != size for m in self._maps):
                self._maps = [mmap.mmap(-1, size) for _ in range(count)]
            views = [memoryview(m) for m in self._maps]
            try:
                yield views
            finally:
                for view in views:
                    view.release()
        finally:
            self._lock.release()


_POOL = _Pool()
