"""A file written front to back with direct I/O, by a thread, from a small ring of aligned buffers.

Why: a dataset's files (GiBs) written through the page cache leave that many dirty pages, which
the kernel throttles in bursts once past its dirty threshold and which count against the memory
the preparation may use (a cgroup charges them): written and fsynced that way, the time varies
widely from run to run, while O_DIRECT from one reused buffer is steady and faster. The
caller copies its bytes into one buffer while a thread writes the one before: the disk works
while the next rows are computed.

Each buffer also goes, in order, to the `consumers` (the file's two digests), each in a thread of
its own beside the writing one, so on a machine of few cores the checksums of one buffer take
the time of the slower of them, not of both.

The file's bytes are exactly what was written: the last block is padded for the write and the
file truncated to its length. Where the filesystem refuses O_DIRECT (at open, or at any write),
the file is written through the page cache from there on; `close` fsyncs either way, and an
error of the thread is raised in the caller by the next `write` or by `close`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from graphtier.service.storage.dio_alignment import PAGE  # the O_DIRECT alignment every reported one divides

BUFFER_BYTES = 4 << 20  # per buffer (3 held: 12 MiB beside the budgeted work); a smaller file gets a buffer of its size
BUFFERS = 3  # one filled by the caller, up to two queued or being written and consumed
THREAD_PREFIX = "graphtier-write-"

_Item = tuple[mmap.mmap, int, int]  # a full buffer, its file offset, its length


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class DirectFileWriter:
    """Writes `path` (created or truncated) front to back; `size_hint`, the file's final size when
    known, keeps the buffers of a small file small. Each of `consumers` sees every byte, in order."""

    def __init__(
        self,
        path: Path | str,
        *,
        size_hint: int | None = None,
        consumers: Sequence[Callable[[memoryview], object]] = (),
        buffer_bytes: int = BUFFER_BYTES,
    ) -> None:
        self.path = Path(path)
        capacity = buffer_bytes if size_hint is None else min(buffer_bytes, max(PAGE, _round_up(size_hint, PAGE)))
        capacity = _round_up(capacity, PAGE)
        self.length = 0  # bytes accepted so far
        self._error: BaseException | None = None
        self._closed = self._failed = False
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.SimpleQueue[_Item | None]] = []
        self._buffers = [
            mmap.mmap(-1, capacity) for _ in range(BUFFERS)
        ]  # before the file: nothing to undo if this fails
        self._fd = self._open()
        try:
            self._start(consumers)
        except BaseException:
            self._stop()
            self._release()
            raise

    def _start(self, consumers: Sequence[Callable[[memoryview], object]]) -> None:
        self._free: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
        for buffer in self._buffers[1:]:
            self._free.put(buffer)
        self._current: mmap.mmap | None = self._buffers[0]
        self._filled = 0
        self._offset = 0  # the file offset of the buffer being filled
        stages = [self._write_at, *(self._consume_with(consumer) for consumer in consumers)]
        self._lock = threading.Lock()
        self._users: dict[int, int] = {}  # id(buffer) -> stages still to see it
        for stage in stages:
            items: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._run, args=(stage, items), name=f"{THREAD_PREFIX}{self.path.name}", daemon=True
            )
            thread.start()
            self._queues.append(items)
            self._threads.append(thread)

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags | getattr(os, "O_DIRECT", 0), 0o644)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            fd = os.open(self.path, flags, 0o644)  # the filesystem takes no O_DIRECT
        self.direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))
        return fd

    def write(self, data: np.ndarray | bytes | memoryview) -> None:
        """Append the bytes of `data` (any C-contiguous buffer)."""
        if self._closed:
            raise ValueError(f"{self.path.name}: write after close")
        if self._failed:
            raise ValueError(f"{self.path.name}: an earlier write failed; the file is incomplete")
        self._raise_error()
        source = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        done = 0
        try:
            while done < source.size:
                current = self._current
                assert current is not None  # a buffer to fill until the last one is submitted, at close
                n = min(len(current) - self._filled, source.size - done)
                np.frombuffer(current, np.uint8)[self._filled : self._filled + n] = source[done : done + n]
                self._filled += n
                done += n
                if self._filled == len(current):
                    self._submit()
        except BaseException:
            self._failed = True  # some of `data` may be queued, some not: `close` refuses, `abort` cleans up
            raise
        self.length += source.size

    def close(self) -> None:
        """Write what is left, truncate the padding, fsync and close; raises the first error of a thread."""
        if self._closed:
            return
        try:
            if self._failed:
                raise ValueError(f"{self.path.name}: not closed, an earlier write failed; the file is incomplete")
            if self._filled:
                self._submit(last=True)
            self._stop()  # every queued buffer written and hashed
            self._raise_error()
            if os.fstat(self._fd).st_size != self.length:
                os.ftruncate(self._fd, self.length)
            os.fsync(self._fd)
        finally:
            self._stop()
            self._release()

    def abort(self) -> None:
        """Stop writing (the file is left as it is, for the caller to remove)."""
        if not self._closed:
            self._stop()
            self._release()

    def _submit(self, last: bool = False) -> None:
        assert self._current is not None  # submitted once: the last submit leaves None
        item = (self._current, self._offset, self._filled)
        self._offset += self._filled
        self._current, self._filled = None, 0  # handed over: never queued twice
        with self._lock:
            self._users[id(item[0])] = len(self._queues)
        for q in self._queues:
            q.put(item)
        if not last:
            self._current = self._free.get()
        self._raise_error()

    def _stop(self) -> None:
        for q, thread in zip(self._queues, self._threads, strict=True):
            if thread.is_alive():
                q.put(None)
        for thread in self._threads:
            thread.join()

    def _release(self) -> None:
        if self._closed:
            return
        self._closed = True
        os.close(self._fd)
        for buffer in self._buffers:
            with contextlib.suppress(BufferError):  # a consumer kept a view: the mapping goes when that view does
                buffer.close()

    def _raise_error(self) -> None:
        error = self._error
        if isinstance(error, OSError):
            raise OSError(error.errno, f"writing {self.path}: {error.strerror}") from error
        if error is not None:
            raise RuntimeError(f"writing {self.path}: {error!r}") from error

    def _run(self, stage: Callable[[mmap.mmap, int, int], None], items: queue.SimpleQueue[_Item | None]) -> None:
        """A thread: `stage` on each full buffer in turn; the last stage done with a buffer frees it."""
        while (item := items.get()) is not None:
            buffer, offset, length = item
            try:
                if self._error is None:
                    stage(buffer, offset, length)
            except BaseException as e:  # raised in the caller's thread
                self._error = self._error or e
            finally:
                with self._lock:
                    self._users[id(buffer)] -= 1
                    free = self._users[id(buffer)] == 0
                if free:
                    self._free.put(buffer)

    @staticmethod
    def _consume_with(consumer: Callable[[memoryview], object]) -> Callable[[mmap.mmap, int, int], None]:
        def stage(buffer: mmap.mmap, offset: int, length: int) -> None:
            with memoryview(buffer) as view, view[:length] as data:
                consumer(data)  # released after: an error's traceback keeps no pointer into the buffer

        return stage

    def _write_at(self, buffer: mmap.mmap, offset: int, length: int) -> None:
        size = _round_up(length, PAGE) if self.direct else length
        if size > length:
            buffer[length:size] = bytes(size - length)  # the padding, truncated at close (consumers read [:length])
        with memoryview(buffer) as view:
            done = 0
            while done < size:
                try:
                    done += os.pwrite(self._fd, view[done:size], offset + done)
                except OSError as e:
                    if e.errno != errno.EINVAL or not self.direct:
                        raise
                    # O_DIRECT taken at open but these writes refused (or a short write left the rest
                    # unaligned): through the page cache from here on, without the padding
                    fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                    self.direct, size = False, max(length, done)
