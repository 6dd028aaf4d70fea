"""The dataset files' writer: direct I/O from a ring of buffers by a thread, the bytes exactly those written."""

from __future__ import annotations

import hashlib
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from graphtier.service.prepared.digests import file_digest
from graphtier.service.prepared.direct_writer import PAGE, DirectFileWriter
from graphtier.service.prepared.npy_io import NpyStreamWriter, file_sha256, write_npy


def _takes_direct_io(directory) -> bool:
    """Whether the filesystem takes an O_DIRECT write of one aligned page (not only the open)."""
    probe = directory / "probe"
    page = mmap.mmap(-1, PAGE)
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
        try:
            return os.pwrite(fd, page, 0) == PAGE
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        page.close()
        probe.unlink(missing_ok=True)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _writer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("graphtier-write-")]


@pytest.mark.parametrize("sizes", [[1], [PAGE], [3 * PAGE + 5, 1, 7 * PAGE - 3, 2 * PAGE], [10 * PAGE + 17] * 5])
def test_the_file_holds_exactly_the_bytes_written_in_order(tmp_path, sizes):
    rng = np.random.default_rng(len(sizes))
    pieces = [rng.integers(0, 256, size, dtype=np.uint8) for size in sizes]
    seen = hashlib.sha256()
    path = tmp_path / "out.bin"
    writer = DirectFileWriter(path, consumers=[seen.update], buffer_bytes=2 * PAGE)  # pieces cross buffers
    for piece in pieces:
        writer.write(piece)
    writer.close()
    expected = b"".join(p.tobytes() for p in pieces)
    assert path.read_bytes() == expected  # the padding of the last block is truncated away
    assert seen.hexdigest() == hashlib.sha256(expected).hexdigest()
    assert writer.direct == _takes_direct_io(tmp_path)
    assert _writer_threads() == []


def test_the_npy_files_are_what_numpy_reads_and_their_digests_are_the_files(tmp_path):
    array = np.random.default_rng(1).standard_normal((1000, 37)).astype(np.float32)  # rows straddle blocks
    info = write_npy(tmp_path / "a.npy", array)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), array)
    assert info.sha256 == file_sha256(tmp_path / "a.npy")
    assert info.blake3 == file_digest(tmp_path / "a.npy", "blake3")
    stream = NpyStreamWriter(tmp_path / "b.npy", array.shape, array.dtype)
    for start in range(0, 1000, 333):
        stream.write(array[start : start + 333])
    assert stream.close().sha256 == info.sha256
    assert (tmp_path / "b.npy").read_bytes() == (tmp_path / "a.npy").read_bytes()


def test_an_error_in_the_writer_thread_reaches_the_caller_and_nothing_is_left_running(tmp_path):
    def failing_digest(view):
        raise ValueError("digest refused")

    fds = _open_fds()
    writer = DirectFileWriter(tmp_path / "out.bin", consumers=[failing_digest], buffer_bytes=PAGE)
    writer.write(np.zeros(PAGE + 10, np.uint8))  # one full buffer goes to the threads, 10 bytes wait
    time.sleep(0.2)
    with pytest.raises(RuntimeError, match=r"out\.bin.*digest refused"):
        writer.close()  # raised, and still nothing left open
    assert _writer_threads() == [] and _open_fds() == fds
    with pytest.raises(ValueError, match="write after close"):
        writer.write(b"x")


def test_a_write_interrupted_midway_cannot_be_closed_as_if_complete(tmp_path):
    """Ctrl-C while the caller waits for a free buffer: part of the data is queued, part not."""
    fds = _open_fds()
    writer = DirectFileWriter(tmp_path / "out.bin", consumers=[lambda view: time.sleep(0.3)], buffer_bytes=PAGE)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            writer.write(np.ones(10 * PAGE, np.uint8))  # blocks on the slow consumer
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    with pytest.raises(ValueError, match="earlier write failed"):
        writer.close()
    assert _writer_threads() == [] and _open_fds() == fds


def test_a_short_stream_is_refused_and_its_writer_stopped(tmp_path):
    stream = NpyStreamWriter(tmp_path / "c.npy", (10, 4), np.int64)
    stream.write(np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match=r"c\.npy: 3 rows written, 10 announced"):
        stream.close()
    assert _writer_threads() == []
    with pytest.raises(ValueError, match="at least one dimension"):
        NpyStreamWriter(tmp_path / "d.npy", (), np.int64)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_write_the_disk_refuses_is_an_error_naming_the_file(tmp_path):
    """A real refusal by the kernel (the file-size limit, EFBIG), in a child whose limit it is."""
    script = textwrap.dedent(f"""
        import resource, signal, numpy as np
        from graphtier.service.prepared.npy_io import write_npy
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        write_npy({str(tmp_path / "big.npy")!r}, np.ones(1 << 20, np.int64))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "big.npy" in done.stderr and "File too large" in done.stderr, done.stderr
