"""The storage tier read for real: the rows a mini-batch needs, read with O_DIRECT.

Rows past the host tier stay in the prepared dataset's `features.npy`. `StorageReader`
reads a batch's rows from it in one go, planned by `read_plan`: runs of adjacent rows bound
for consecutive output rows, when their bytes line up with the file's O_DIRECT alignment,
are read straight into the output (no staging, no copy); every other row is read into one
page-aligned staging buffer, locked in memory where the limits allow, by requests widened
to the file's O_DIRECT block (its offset alignment: a 512 B sector on most devices, so a
512 B row costs one sector, not a 4 KiB page; a page where the kernel does not say, and in
`page-cache` mode) and coalesced where rows share or touch a block (the ids are hotness ranks,
so such neighbours are equally hot and come together), then copied to its slot: rows of a
long in-order run by the thread that read them, while the other requests are still in
flight, the rest by one gather at the end. A pool of threads keeps up to `inflight`
requests in flight (`os.preadv` releases the GIL). `empty_rows` hands out output rows
placed so that runs line up. In `direct` mode the page cache is bypassed, so what is
counted as storage traffic is traffic to the device; the `page-cache` mode reads the same
requests through the kernel's cache. The staging buffer never outgrows `staging_bytes` (sized by
the caller from the memory it may use): a batch whose staged requests need more is read in parts.
Every row read is checked against its recorded checksum (`row_checksums`), when the dataset has them.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.storage.dio_alignment import DirectIOAlignment, direct_io_alignment
from graphtier.service.storage.read_plan import (
    ALIGN,
    MAX_REQUEST,
    NO_DIRECT_READS,
    DirectReads,
    ReadPlan,
    RunCopies,
    no_run_copies,
    plan_direct_reads,
    plan_reads,
    plan_run_copies,
)
from graphtier.service.storage.row_checksums import RowChecksums

StorageMode = Literal["direct", "page-cache"]
STORAGE_MODES: tuple[str, ...] = ("direct", "page-cache")
PAGE_CACHE_ALIGNMENT = DirectIOAlignment(memory=1, offset=ALIGN, reported=False)  # buffered reads: any address


class StagingBuffer:
    """Page-aligned anonymous memory, locked (pinned) in RAM when RLIMIT_MEMLOCK allows, grown on demand
    up to the reader's cap."""

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

    def ensure(self, nbytes: int, *, cap: int) -> None:
        """At least `nbytes` (doubling, but to no more than `cap` beyond them)."""
        if self.map is None or nbytes > len(self.map):
            self._allocate(max(nbytes, min(cap, 2 * (len(self.map) if self.map else 0))))

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
    direct_requests: int = 0  # of those, read straight into the output (no staging, no copy)
    bytes_read: int = 0  # what the device was asked for (aligned, whole requests)
    row_bytes: int = 0  # what the batches needed
    seconds: float = 0.0  # in read(), all of it
    io_seconds: float = 0.0  # waiting for the requests of a batch, from the first issued to the last done
    request_seconds: float = 0.0  # every request's own latency, summed: / io_seconds = mean queue depth


class StorageReader:
    """Reads feature rows [first_row, num_rows) of a `.npy` file; see the module docstring. `alignment`
    overrides what the file's statx reports (direct mode only)."""

    def __init__(
        self,
        path: Path,
        *,
        data_offset: int,
        row_bytes: int,
        first_row: int,
        num_rows: int,
        mode: StorageMode = "direct",
        inflight: int = 16,
        max_request: int = MAX_REQUEST,
        staging_bytes: int = 64 << 20,
        alignment: DirectIOAlignment | None = None,
        checksums: RowChecksums | None = None,
    ) -> None:
        if mode not in STORAGE_MODES:
            raise GraphtierError(f"storage mode {mode!r}: expected one of {', '.join(STORAGE_MODES)}")
        _check_geometry(
            path,
            data_offset=data_offset,
            row_bytes=row_bytes,
            first_row=first_row,
            num_rows=num_rows,
            max_request=max_request,
            alignment=alignment,
        )
        self.path, self.mode = Path(path), mode
        self.data_offset, self.row_bytes = data_offset, row_bytes
        self.first_row, self.num_rows = first_row, num_rows
        self.max_request = max_request
        self.checksums = checksums  # each row read is checked against them (storage-relative, as `read` takes)
        self.file_end = data_offset + num_rows * row_bytes
        flags = os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0)
        try:
            self.fd = os.open(self.path, flags)
        except OSError as exc:
            raise GraphtierError(
                f"{self.path}: cannot open the storage tier for {mode} reads ({exc.strerror})"
            ) from None
        size = os.fstat(self.fd).st_size
        if size < self.file_end:
            os.close(self.fd)
            raise GraphtierError(
                f"{self.path}: holds {size:,} bytes, but its {num_rows:,} rows of {row_bytes} B from "
                f"byte {data_offset} end at byte {self.file_end:,}: the file is truncated; "
                f"prepare the dataset again"
            )
        if mode == "direct":
            self.alignment = alignment or direct_io_alignment(self.path)
            self.block = self.alignment.block  # staged requests' unit
        else:
            self.alignment = PAGE_CACHE_ALIGNMENT
            self.block = ALIGN  # the page cache reads whole pages whatever is asked
        self.staging_cap = max(staging_bytes, max_request, 2 * ALIGN)
        self.staging = StagingBuffer(min(staging_bytes, 1 << 20))
        self.pool = ThreadPoolExecutor(max_workers=max(1, inflight), thread_name_prefix="graphtier-storage")
        self.stats = ReaderStats()

    def empty_rows(self, count: int) -> torch.Tensor:
        """`count` uninitialised rows (uint8, `row_bytes` each) placed so that runs read into them line up
        with the file's O_DIRECT alignment and go straight in: their address is congruent to the storage
        rows' file offset modulo the memory alignment (every run does when `row_bytes` is a multiple of it)."""
        align = self.alignment.memory
        base = torch.empty(count * self.row_bytes + align, dtype=torch.uint8)
        shift = (self.data_offset + self.first_row * self.row_bytes - base.data_ptr()) % align
        return base[shift : shift + count * self.row_bytes].view(count, self.row_bytes)

    def _read(self, into: memoryview, offset: int, length: int) -> tuple[int, float]:
        """One request into `into` (staging or output bytes): (bytes read, its latency in seconds)."""
        started = time.perf_counter()
        done = 0
        while done < length:
            try:
                got = os.preadv(self.fd, [into[done:length]], offset + done)
            except OSError as exc:
                raise GraphtierError(
                    f"{self.path}: reading {length:,} bytes at byte {offset + done:,} failed "
                    f"({exc.strerror}{self._einval_hint(exc)})"
                ) from None
            if got == 0:  # end of file: only the file's last block can be short, and only past the rows
                if offset + done < self.file_end:
                    raise GraphtierError(
                        f"{self.path}: now holds {os.fstat(self.fd).st_size:,} bytes, but its rows "
                        f"end at byte {self.file_end:,}: the file was truncated while in use"
                    )
                break
            done += got
        return done, time.perf_counter() - started

    def _einval_hint(self, exc: OSError) -> str:
        """For an O_DIRECT read refused as misaligned: the alignment used and the one the file asks."""
        if exc.errno != errno.EINVAL or self.mode != "direct":
            return ""
        asked, used = direct_io_alignment(self.path), self.alignment
        return (
            f"; O_DIRECT reads here were aligned to {used.memory} B in memory and {used.offset} B in the file, "
            f"the file asks {asked.memory} B and {asked.offset} B" + ("" if asked.reported else " (assumed)")
        )

    def read(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Rows `rows` (storage-relative, any order, repeats allowed) into out[i] (`out` C-contiguous,
        viewed as bytes, at least `len(rows)` rows)."""
        if self.fd < 0:
            raise GraphtierError(f"{self.path}: the storage reader was closed")
        rows = np.asarray(rows)
        if rows.ndim != 1 or not (np.issubdtype(rows.dtype, np.integer) or rows.size == 0):
            raise GraphtierError(f"storage rows are a 1-D array of integers; got shape {rows.shape} of {rows.dtype}")
        rows = rows.astype(np.int64, copy=False)
        if rows.size == 0:
            return
        started = time.perf_counter()
        lo, hi = int(rows.min()), int(rows.max())
        if lo < 0 or hi >= self.num_rows - self.first_row:
            raise GraphtierError(f"storage rows must lie in [0, {self.num_rows - self.first_row})")
        target = output_rows(out, rows.size, self.row_bytes)
        self._read_part(rows, target)
        if self.checksums is not None:
            self.checksums.verify(rows, target)
        s = self.stats
        s.batches, s.rows = s.batches + 1, s.rows + rows.size
        s.row_bytes += rows.size * self.row_bytes
        s.seconds += time.perf_counter() - started

    def _read_part(self, rows: np.ndarray, target: np.ndarray) -> None:
        """Rows `rows` into target[i]; in parts (each read the same way) when their staged requests
        would need more than the staging buffer's cap."""
        in_order = rows.size == 1 or bool((rows[1:] > rows[:-1]).all())  # sorted and distinct (a coalesced batch)
        # distinct rows, and where each goes: row_slot None when row i goes to output row i
        unique, inverse, row_slot = rows, np.empty(0, np.int64), None
        if not in_order:
            unique, inverse = np.unique(rows, return_inverse=True)
            if unique.size == rows.size:
                row_slot = np.empty(unique.size, np.int64)
                row_slot[inverse] = np.arange(rows.size)
        repeats = unique.size < rows.size
        file_rows = unique + self.first_row
        direct = (
            NO_DIRECT_READS
            if repeats
            else plan_direct_reads(
                file_rows,
                row_slot,
                out_address=target.ctypes.data,
                data_offset=self.data_offset,
                row_bytes=self.row_bytes,
                alignment=self.alignment,
                max_request=self.max_request,
            )
        )
        staged = direct.uncovered(unique.size)
        staged_rows = file_rows[staged]
        plan = plan_reads(
            staged_rows,
            data_offset=self.data_offset,
            row_bytes=self.row_bytes,
            align=self.block,
            max_request=self.max_request,
        )
        if plan.total > self.staging_cap and rows.size > 1:
            parts = min(rows.size, 2 * -(-plan.total // self.staging_cap))  # halves of the cap: uneven parts fit
            for at in np.array_split(np.arange(rows.size), parts):
                self._read_part(rows[at[0] : at[-1] + 1], target[at[0] : at[-1] + 1])
            return
        staged_slot = staged if row_slot is None else row_slot[staged]
        copies = no_run_copies(plan) if repeats else plan_run_copies(plan, staged_rows, staged_slot, self.row_bytes)
        self.staging.ensure(plan.total, cap=self.staging_cap)
        got, request_s = self._issue(plan, copies, direct, target)
        rest = np.flatnonzero(~copies.copied)  # staged rows not yet in place: one gather from the staging buffer
        if rest.size:
            self._gather_rest(plan.row_at, rest, staged_slot, inverse if repeats else None, target)
        s = self.stats
        s.requests += plan.offsets.size + direct.offsets.size
        s.direct_requests += direct.offsets.size
        s.bytes_read += got
        s.request_seconds += request_s

    def _issue(self, plan: ReadPlan, copies: RunCopies, direct: DirectReads, target: np.ndarray) -> tuple[int, float]:
        """Every request, `inflight` at a time; the staged ones' whole-run rows copied by their threads."""
        staging, output = self.staging.view.data, target.reshape(-1).data
        rb = self.row_bytes

        def staged(i: int, offset: int, length: int, at: int) -> tuple[int, float]:
            got = self._read(staging[at : at + length], offset, length)
            if copies.count[i]:  # this request's whole rows go to their slots now, while the others are in flight
                n, src, slot = int(copies.count[i]), int(plan.row_at[copies.first[i]]), int(copies.slot[i])
                target[slot : slot + n] = self.staging.view[src : src + n * rb].reshape(n, rb)
            return got

        def straight(offset: int, length: int, into: int) -> tuple[int, float]:
            return self._read(output[into : into + length], offset, length)

        issued = time.perf_counter()
        futures = [
            self.pool.submit(straight, *request)
            for request in zip(direct.offsets.tolist(), direct.lengths.tolist(), direct.into.tolist(), strict=True)
        ]
        futures += [
            self.pool.submit(staged, *request)
            for request in zip(
                range(plan.offsets.size),
                plan.offsets.tolist(),
                plan.lengths.tolist(),
                plan.staging.tolist(),
                strict=True,
            )
        ]
        wait(futures)  # all of them, also when one failed: none may still be writing when the caller sees an error
        self.stats.io_seconds += time.perf_counter() - issued
        staging.release()
        output.release()
        done = [future.result() for future in futures]
        return sum(n for n, _ in done), sum(t for _, t in done)

    def _gather_rest(
        self,
        row_at: np.ndarray,
        rest: np.ndarray,
        staged_slot: np.ndarray,
        inverse: np.ndarray | None,
        target: np.ndarray,
    ) -> None:
        """Staged rows `rest` (indices into the staged rows, at `row_at` in the staging buffer) to their
        output rows `staged_slot`; with repeated rows (`inverse`: output row -> staged row), every output row."""
        staging = torch.from_numpy(self.staging.view)
        windows = staging.as_strided((staging.numel() - self.row_bytes + 1, self.row_bytes), (1, 1))
        into = torch.from_numpy(target)
        if inverse is not None:
            torch.index_select(windows, 0, torch.from_numpy(row_at[inverse]), out=into)
        elif rest.size == target.shape[0]:  # every row staged: in output order, one select
            order = np.empty(rest.size, np.int64)
            order[staged_slot] = row_at
            torch.index_select(windows, 0, torch.from_numpy(order), out=into)
        else:
            picked = windows.index_select(0, torch.from_numpy(row_at[rest]))
            into.index_copy_(0, torch.from_numpy(staged_slot[rest]), picked)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.staging.close()


def _check_geometry(
    path: Path | str,
    *,
    data_offset: int,
    row_bytes: int,
    first_row: int,
    num_rows: int,
    max_request: int,
    alignment: DirectIOAlignment | None,
) -> None:
    """GraphtierError naming the value unless the rows and requests describe something readable."""
    if row_bytes <= 0 or data_offset < 0 or not 0 <= first_row <= num_rows:
        raise GraphtierError(
            f"{path}: storage rows [{first_row}, {num_rows}) of {row_bytes} B from byte "
            f"{data_offset}: need row bytes > 0, a data offset >= 0 and 0 <= first row <= rows"
        )
    if max_request <= 0 or max_request % ALIGN:
        raise GraphtierError(f"{path}: max_request {max_request}: requests are a positive multiple of {ALIGN} B")
    if alignment is not None and not alignment.valid:
        raise GraphtierError(
            f"{path}: O_DIRECT alignment {alignment.memory} B / {alignment.offset} B: each a "
            f"power of two up to {ALIGN} B"
        )


def output_rows(out: np.ndarray, count: int, row_bytes: int) -> np.ndarray:
    """`out`'s first `count` rows as bytes, refused unless writable C-contiguous rows of `row_bytes` (a copy
    made by reshaping a strided array would take the rows and drop them; a read-only mapping would fault)."""
    if not out.flags.c_contiguous:
        raise GraphtierError(f"storage rows are read into C-contiguous rows; got an array with strides {out.strides}")
    if not out.flags.writeable:
        raise GraphtierError("storage rows are read into writable rows; got a read-only array")
    rows = out.reshape(out.shape[0], -1).view(np.uint8)
    if rows.shape[0] < count or rows.shape[1] != row_bytes:
        raise GraphtierError(
            f"storage rows: {count} rows of {row_bytes} B asked for, into an array of "
            f"{rows.shape[0]} rows of {rows.shape[1]} B"
        )
    return rows[:count]
