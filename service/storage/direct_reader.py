"""The storage tier read for real: the rows a mini-batch needs, read with O_DIRECT.

Rows past the host tier stay in the prepared dataset's `features.npy`. `StorageReader`
reads a batch's rows from it in one go: the rows are sorted and deduplicated, each row's
byte range is widened to the device's block alignment, ranges that touch or overlap are
merged (adjacent rows coalesce into one request) and long ones split at `max_request`.
A pool of threads keeps up to `inflight` requests in flight (`os.preadv` releases the
GIL) into one page-aligned staging buffer, locked in memory where the limits allow. A run
of adjacent rows bound for consecutive slots (a coalesced run) is copied to its slots
request by request, by the thread that read each, while the other requests are still in
flight, so the copy overlaps the I/O; the other rows are copied by one gather at the end.
In `direct` mode the page cache is bypassed, so what is counted as storage traffic is
traffic to the device; the `page-cache` mode reads the same requests through the kernel's
cache.
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
MIN_RUN_COPY = 64 << 10  # shorter runs are left to the gather at the end: a copy each would cost more than it saves


@dataclass(frozen=True)
class ReadPlan:
    """The requests that fetch a sorted set of rows, and where each row lands in the staging buffer."""

    offsets: np.ndarray  # int64 file offset of each request (aligned)
    lengths: np.ndarray  # int64 bytes of each request (aligned)
    staging: np.ndarray  # int64 staging offset of each request
    row_at: np.ndarray  # int64 staging offset of each row, in the rows' (sorted) order
    run_of_piece: np.ndarray  # int64 run (coalesced range) each request belongs to
    run_rows: np.ndarray  # int64 index of each run's first row, then the number of rows: run r is rows [r, r+1)

    @property
    def total(self) -> int:
        return int(self.lengths.sum())


def plan_reads(rows: np.ndarray, *, data_offset: int, row_bytes: int, align: int = ALIGN,
               max_request: int = MAX_REQUEST) -> ReadPlan:
    """Requests for `rows` (sorted, distinct file row indices); see the module docstring."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        empty = np.empty(0, np.int64)
        return ReadPlan(empty, empty, empty, empty, empty, np.zeros(1, np.int64))
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
    return ReadPlan(offsets, lengths, staging, row_at, run_of_piece, np.append(first, rows.size))


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
        if rows.size > 1 and bool((rows[1:] > rows[:-1]).all()):  # sorted and distinct already (a coalesced batch)
            unique, inverse = rows, np.arange(rows.size)
        else:
            unique, inverse = np.unique(rows, return_inverse=True)
        plan = plan_reads(unique + self.first_row, data_offset=self.data_offset, row_bytes=self.row_bytes,
                          max_request=self.max_request)
        self.staging.ensure(plan.total)
        target = out.reshape(out.shape[0], -1).view(np.uint8)[: rows.size]
        first, count, slot, copied = self.piece_copies(plan, unique, inverse)

        def piece(offset: int, length: int, at: int, i: int) -> tuple[int, float]:
            got = self._read(offset, length, at)
            if count[i]:  # this request's whole rows go to their slots now, while the others are in flight
                n, src = int(count[i]), int(plan.row_at[first[i]])
                target[slot[i] : slot[i] + n] = self.staging.view[src : src + n * self.row_bytes].reshape(n, -1)
            return got

        issued = time.perf_counter()
        done = list(self.pool.map(piece, plan.offsets.tolist(), plan.lengths.tolist(), plan.staging.tolist(),
                                  range(plan.offsets.size)))
        self.stats.io_seconds += time.perf_counter() - issued
        got = sum(n for n, _ in done)
        self.stats.request_seconds += sum(t for _, t in done)
        rest = np.flatnonzero(~copied[inverse])
        if rest.size:  # the other rows: one gather from row windows at every staging byte
            staging = torch.from_numpy(self.staging.view)
            windows = staging.as_strided((staging.numel() - self.row_bytes + 1, self.row_bytes), (1, 1))
            into = torch.from_numpy(target)
            picked = torch.from_numpy(plan.row_at[inverse[rest]])
            if rest.size == rows.size:
                torch.index_select(windows, 0, picked, out=into)
            else:
                into.index_copy_(0, torch.from_numpy(rest), windows.index_select(0, picked))
            del staging, windows, into
        s = self.stats
        s.batches, s.rows, s.requests = s.batches + 1, s.rows + rows.size, s.requests + plan.offsets.size
        s.bytes_read, s.row_bytes = s.bytes_read + got, s.row_bytes + rows.size * self.row_bytes
        s.seconds += time.perf_counter() - started

    def piece_copies(self, plan: ReadPlan, unique: np.ndarray,
                     inverse: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What each request's thread copies once its bytes are in: (first row, rows, first slot) per request,
        and which of the distinct rows that covers. A request copies the rows lying whole inside it when its
        run's rows are adjacent, each read once and bound for consecutive slots in order (so one slice copy
        places them), and the run holds at least `MIN_RUN_COPY` bytes; rows straddling two requests, and
        every row of other runs, are left to the gather at the end."""
        pieces = plan.offsets.size
        first, count, slot = np.zeros(pieces, np.int64), np.zeros(pieces, np.int64), np.zeros(pieces, np.int64)
        copied = np.zeros(unique.size, dtype=bool)
        if unique.size != inverse.size:  # repeated rows: each gathered to all its slots at the end
            return first, count, slot, copied
        row_slot = np.empty(unique.size, np.int64)
        row_slot[inverse] = np.arange(inverse.size)
        # a break: the next row is not the next in the file, or does not go to the next slot
        breaks = np.zeros(unique.size, np.int64)
        breaks[1:] = (np.diff(unique) != 1) | (np.diff(row_slot) != 1)
        cum = np.cumsum(breaks)
        run_first, run_stop = plan.run_rows[:-1], plan.run_rows[1:]
        whole = (cum[run_stop - 1] == cum[run_first]) & ((run_stop - run_first) * self.row_bytes >= MIN_RUN_COPY)
        lo = np.searchsorted(plan.row_at, plan.staging, side="left")  # row_at increases with the sorted rows
        hi = np.searchsorted(plan.row_at + self.row_bytes, plan.staging + plan.lengths, side="right")
        use = whole[plan.run_of_piece] & (hi > lo)
        first[use], count[use] = lo[use], (hi - lo)[use]
        slot[use] = row_slot[lo[use]]
        marks = np.zeros(unique.size + 1, np.int64)
        np.add.at(marks, lo[use], 1)
        np.add.at(marks, hi[use], -1)
        copied[:] = np.cumsum(marks[:-1]) > 0
        return first, count, slot, copied

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.staging.close()
