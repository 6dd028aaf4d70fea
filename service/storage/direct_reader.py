"""The storage tier read for real: the rows a mini-batch needs, read with O_DIRECT.

Rows past the host tier stay in the prepared dataset's `features.npy`. `StorageReader`
reads a batch's rows from it in one go: the rows are sorted and deduplicated, each row's
byte range is widened to the device's block alignment, ranges that touch or overlap are
merged (adjacent rows coalesce into one request) and long ones split at `max_request`.
A pool of threads keeps up to `inflight` requests in flight (`os.preadv` releases the
GIL) into one page-aligned staging buffer, locked in memory where the limits allow; the
rows are then copied from the staging buffer to their slots. In `direct` mode the page
cache is bypassed, so what is counted as storage traffic is traffic to the device; the
`page-cache` mode reads the same requests through the kernel's cache.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from graphtier.service.errors import GraphtierError

StorageMode = Literal["direct", "page-cache"]
STORAGE_MODES: tuple[str, ...] = ("direct", "page-cache")
ALIGN = 4096  # O_DIRECT offsets, lengths and buffers: a multiple of the logical block size
MAX_REQUEST = 1 << 20


@dataclass(frozen=True)
class ReadPlan:
    """The requests that fetch a sorted set of rows, and where each row lands in the staging buffer."""

    offsets: np.ndarray  # int64 file offset of each request (aligned)
    lengths: np.ndarray  # int64 bytes of each request (aligned)
    staging: np.ndarray  # int64 staging offset of each request
    row_at: np.ndarray  # int64 staging offset of each row, in the rows' (sorted) order

    @property
    def total(self) -> int:
        return int(self.lengths.sum())


def plan_reads(rows: np.ndarray, *, data_offset: int, row_bytes: int, align: int = ALIGN,
               max_request: int = MAX_REQUEST) -> ReadPlan:
    """Requests for `rows` (sorted, distinct file row indices); see the module docstring."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        empty = np.empty(0, np.int64)
        return ReadPlan(empty, empty, empty, empty)
    starts = data_offset + rows * row_bytes
    lo = starts // align * align
    hi = -(-(starts + row_bytes) // align) * align
    new_run = np.empty(rows.size, dtype=bool)
    new_run[0] = True
    new_run[1:] = lo[1:] > hi[:-1]  # a gap of at least one block: a new request
    first = np.flatnonzero(new_run)
    run_lo = lo[first]
    run_hi = np.append(hi[first[1:] - 1], hi[-1])  # rows are sorted, so a run ends where its last row ends
    run_of_row = np.cumsum(new_run) - 1
    run_len = run_hi - run_lo
    run_staging = np.concatenate([[0], np.cumsum(run_len)[:-1]])
    pieces = -(-run_len // max_request)
    run_of_piece = np.repeat(np.arange(run_lo.size), pieces)
    k = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    offsets = run_lo[run_of_piece] + k * max_request
    lengths = np.minimum(max_request, run_hi[run_of_piece] - offsets)
    staging = run_staging[run_of_piece] + k * max_request
    row_at = run_staging[run_of_row] + (starts - run_lo[run_of_row])
    return ReadPlan(offsets, lengths, staging, row_at)


class StagingBuffer:
    """Page-aligned anonymous memory, locked (pinned) in RAM when RLIMIT_MEMLOCK allows, grown on demand."""

    def __init__(self, nbytes: int) -> None:
        self.map: mmap.mmap | None = None
        self.pinned = False
        self._allocate(max(ALIGN, nbytes))

    def _allocate(self, nbytes: int) -> None:
        self.close()
        self.map = mmap.mmap(-1, -(-nbytes // ALIGN) * ALIGN)
        self.view = np.frombuffer(self.map, dtype=np.uint8)
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            address = ctypes.c_void_p.from_buffer(self.map)
            self.pinned = libc.mlock(ctypes.addressof(address), ctypes.c_size_t(len(self.map))) == 0
            del address
        except (OSError, AttributeError, TypeError, ValueError):
            self.pinned = False

    def ensure(self, nbytes: int) -> None:
        if self.map is None or nbytes > len(self.map):
            self._allocate(max(nbytes, 2 * (len(self.map) if self.map else 0)))

    def close(self) -> None:
        if self.map is not None:
            self.view = np.empty(0, np.uint8)
            with contextlib.suppress(BufferError):  # a view of it is still alive somewhere: unmapped when that goes
                self.map.close()
            self.map = None


@dataclass
class ReaderStats:
    batches: int = 0
    rows: int = 0
    requests: int = 0
    bytes_read: int = 0  # what the device was asked for (aligned, whole requests)
    row_bytes: int = 0  # what the batches needed
    seconds: float = 0.0  # in read(), all of it
    io_seconds: float = 0.0  # waiting for the requests of a batch, from the first issued to the last done
    request_seconds: float = 0.0  # every request's own latency, summed: / io_seconds = mean queue depth


class StorageReader:
    """Reads feature rows [first_row, num_rows) of a `.npy` file; see the module docstring."""

    def __init__(self, path: Path, *, data_offset: int, row_bytes: int, first_row: int, num_rows: int,
                 mode: StorageMode = "direct", inflight: int = 16, max_request: int = MAX_REQUEST,
                 staging_bytes: int = 8 << 20) -> None:
        if mode not in STORAGE_MODES:
            raise GraphtierError(f"storage mode {mode!r}: expected one of {', '.join(STORAGE_MODES)}")
        self.path, self.mode = Path(path), mode
        self.data_offset, self.row_bytes = data_offset, row_bytes
        self.first_row, self.num_rows = first_row, num_rows
        self.max_request = max_request
        flags = os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0)
        try:
            self.fd = os.open(self.path, flags)
        except OSError as exc:
            raise GraphtierError(f"{self.path}: cannot open the storage tier for {mode} reads ({exc.strerror})") from None
        self.staging = StagingBuffer(staging_bytes)
        self.pool = ThreadPoolExecutor(max_workers=max(1, inflight), thread_name_prefix="graphtier-storage")
        self.stats = ReaderStats()

    def _read(self, offset: int, length: int, at: int) -> tuple[int, float]:
        """One request into the staging buffer: (bytes read, its latency in seconds)."""
        started = time.perf_counter()
        view, done = memoryview(self.staging.view)[at : at + length], 0
        while done < length:
            got = os.preadv(self.fd, [view[done:]], offset + done)
            if got == 0:  # end of file: only the last block of the file can be short
                break
            done += got
        return done, time.perf_counter() - started

    def read(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Rows `rows` (storage-relative, any order, repeats allowed) into out[i] (`out` viewed as bytes)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return
        if int(rows.min()) < 0 or int(rows.max()) >= self.num_rows - self.first_row:
            raise GraphtierError(f"storage rows must lie in [0, {self.num_rows - self.first_row})")
        started = time.perf_counter()
        unique, inverse = np.unique(rows, return_inverse=True)
        plan = plan_reads(unique + self.first_row, data_offset=self.data_offset, row_bytes=self.row_bytes,
                          max_request=self.max_request)
        self.staging.ensure(plan.total)
        issued = time.perf_counter()
        done = list(self.pool.map(self._read, plan.offsets.tolist(), plan.lengths.tolist(), plan.staging.tolist()))
        self.stats.io_seconds += time.perf_counter() - issued
        got = sum(n for n, _ in done)
        self.stats.request_seconds += sum(t for _, t in done)
        # row windows starting at every byte of the staging buffer; one gather copies each row to its slot
        staging = torch.from_numpy(self.staging.view)
        windows = staging.as_strided((staging.numel() - self.row_bytes + 1, self.row_bytes), (1, 1))
        target = torch.from_numpy(out.reshape(out.shape[0], -1).view(np.uint8))
        torch.index_select(windows, 0, torch.from_numpy(plan.row_at[inverse]), out=target[: rows.size])
        del staging, windows, target
        s = self.stats
        s.batches, s.rows, s.requests = s.batches + 1, s.rows + rows.size, s.requests + plan.offsets.size
        s.bytes_read, s.row_bytes = s.bytes_read + got, s.row_bytes + rows.size * self.row_bytes
        s.seconds += time.perf_counter() - started

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.staging.close()
