"""How a batch's storage rows are read: the requests, and where each request's bytes go.

Three plans, all vectorised over the batch's distinct rows (sorted file row indices):
- `plan_direct_reads`: runs of adjacent rows bound for consecutive rows of the caller's
  output whose bytes line up with the O_DIRECT alignment (`DirectIOAlignment`) are read
  straight into the output: the run's aligned middle, split at `max_request`. No staging
  buffer, no copy.
- `plan_reads`: every other row through a page-aligned staging buffer. Each row's byte range
  is widened to 4 KiB blocks, ranges that touch or overlap are merged (adjacent rows coalesce
  into one request) and long ones split at `max_request`.
- `plan_run_copies`: which staged requests hold whole rows of an in-order run, so the thread
  that read them copies them to their slots while the other requests are still in flight;
  the rest are gathered from the staging buffer at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphtier.service.storage.dio_alignment import PAGE, DirectIOAlignment

ALIGN = PAGE  # staged requests: offsets, lengths and staging offsets in whole 4 KiB blocks
MAX_REQUEST = 1 << 20
MIN_RUN_COPY = 64 << 10  # shorter runs are left to the gather at the end: a copy each would cost more than it saves
MIN_DIRECT = 64 << 10  # shorter runs go through the staging buffer: their edge blocks would be most of the run


@dataclass(frozen=True)
class ReadPlan:
    """The staged requests that fetch a sorted set of rows, and where each row lands in the staging buffer."""

    offsets: np.ndarray  # int64 file offset of each request (aligned)
    lengths: np.ndarray  # int64 bytes of each request (aligned)
    staging: np.ndarray  # int64 staging offset of each request
    row_at: np.ndarray  # int64 staging offset of each row, in the rows' (sorted) order
    run_of_piece: np.ndarray  # int64 run (coalesced range) each request belongs to
    run_rows: np.ndarray  # int64 index of each run's first row, then the number of rows: run r is rows [r, r+1)

    @property
    def total(self) -> int:
        return int(self.lengths.sum())


def plan_reads(
    rows: np.ndarray, *, data_offset: int, row_bytes: int, align: int = ALIGN, max_request: int = MAX_REQUEST
) -> ReadPlan:
    """Staged requests for `rows` (sorted, distinct file row indices); see the module docstring."""
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
    offsets, lengths, run_of_piece, k = _split(run_lo, run_hi, max_request)
    staging = run_staging[run_of_piece] + k * max_request
    row_at = run_staging[run_of_row] + (starts - run_lo[run_of_row])
    return ReadPlan(offsets, lengths, staging, row_at, run_of_piece, np.append(first, rows.size))


def _split(lo: np.ndarray, hi: np.ndarray, max_request: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ranges [lo, hi) cut into requests of at most `max_request`: (offset, length, range, index in the range)."""
    pieces = -(-(hi - lo) // max_request)
    of_range = np.repeat(np.arange(lo.size), pieces)
    k = np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    offsets = lo[of_range] + k * max_request
    return offsets, np.minimum(max_request, hi[of_range] - offsets), of_range, k


@dataclass(frozen=True)
class DirectReads:
    """Requests read straight into the output, and the distinct rows they deliver whole."""

    offsets: np.ndarray  # int64 file offset of each request (offset-aligned)
    lengths: np.ndarray  # int64 bytes of each request (offset-aligned)
    into: np.ndarray  # int64 byte offset in the output where each request's bytes go (address memory-aligned)
    covered_lo: np.ndarray  # int64 per run read straight in: its first row delivered whole (index into the rows)
    covered_hi: np.ndarray  # int64 per such run: one past its last

    @property
    def total(self) -> int:
        return int(self.lengths.sum())

    def uncovered(self, count: int) -> np.ndarray:
        """Indices of the rows (of `count`) these requests do not deliver: the staged reads' rows."""
        starts = np.concatenate([[0], self.covered_hi])
        sizes = np.concatenate([self.covered_lo, [count]]) - starts
        return np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))

    def covered(self, count: int) -> np.ndarray:
        """Bool per row (of `count`): delivered whole by these requests."""
        mask = np.ones(count, dtype=bool)
        mask[self.uncovered(count)] = False
        return mask


NO_DIRECT_READS = DirectReads(*(np.empty(0, np.int64) for _ in range(5)))


def in_order_breaks(rows: np.ndarray, row_slot: np.ndarray | None) -> np.ndarray:
    """Bool per row after the first: it does not follow the one before it both in the file and in the
    output (`row_slot` each row's output row; None when row i goes to output row i)."""
    breaks = np.diff(rows) != 1
    if row_slot is not None:
        breaks |= np.diff(row_slot) != 1
    return breaks


def plan_direct_reads(
    rows: np.ndarray,
    row_slot: np.ndarray | None,
    *,
    out_address: int,
    data_offset: int,
    row_bytes: int,
    alignment: DirectIOAlignment,
    max_request: int = MAX_REQUEST,
    min_bytes: int = MIN_DIRECT,
) -> DirectReads:
    """Direct requests for `rows` (sorted, distinct file row indices) bound for output rows `row_slot` (None:
    row i to output row i), the output's bytes at `out_address`. A run (adjacent in the file and in the
    output) of at least `min_bytes` is read straight into the output when its file bytes and output bytes
    are congruent modulo the memory alignment: its middle, from its first offset-aligned byte to its last,
    goes in one piece per `max_request`; the rows lying wholly inside the middle are covered, and the run's
    edge rows are left to the staged reads (which write the same bytes where the two meet)."""
    if rows.size == 0:
        return NO_DIRECT_READS
    start_run = np.flatnonzero(np.concatenate([[True], in_order_breaks(rows, row_slot)]))
    stop_run = np.append(start_run[1:], rows.size)
    first_slot = start_run if row_slot is None else row_slot[start_run]
    file_lo = data_offset + rows[start_run] * row_bytes
    file_hi = data_offset + (rows[stop_run - 1] + 1) * row_bytes
    step = alignment.offset
    mid_lo = -(-file_lo // step) * step
    mid_hi = file_hi // step * step
    out_lo = first_slot * row_bytes + (mid_lo - file_lo)
    long_enough = mid_hi - mid_lo >= max(min_bytes, step)
    usable = np.flatnonzero(long_enough & ((out_address + out_lo) % alignment.memory == 0))
    if usable.size == 0:
        return NO_DIRECT_READS
    # the rows starting at or after the middle's start and ending at or before its end
    covered_lo = start_run + -(-(mid_lo - file_lo) // row_bytes)
    covered_hi = start_run + (mid_hi - file_lo) // row_bytes
    usable = usable[covered_hi[usable] > covered_lo[usable]]  # (a row longer than the middle: none)
    if usable.size == 0:
        return NO_DIRECT_READS
    lo, hi = mid_lo[usable], mid_hi[usable]
    offsets, lengths, of_run, k = _split(lo, hi, max_request)
    return DirectReads(
        offsets, lengths, out_lo[usable][of_run] + k * max_request, covered_lo[usable], covered_hi[usable]
    )


@dataclass(frozen=True)
class RunCopies:
    """What each staged request's thread copies once its bytes are in, and which rows that covers."""

    first: np.ndarray  # int64 per request: index of its first row to copy
    count: np.ndarray  # int64 per request: rows to copy (0: none)
    slot: np.ndarray  # int64 per request: output row of its first row
    copied: np.ndarray  # bool per row: copied by some request's thread


def no_run_copies(plan: ReadPlan) -> RunCopies:
    """Nothing copied by the reading threads: every row gathered at the end (rows repeated in the batch)."""
    zeros = np.zeros(plan.offsets.size, np.int64)
    return RunCopies(zeros, zeros, zeros, np.zeros(plan.row_at.size, dtype=bool))


def plan_run_copies(plan: ReadPlan, rows: np.ndarray, row_slot: np.ndarray, row_bytes: int) -> RunCopies:
    """Copies for `plan`'s requests (`rows` its sorted distinct rows, `row_slot` their output rows).
    A request copies the rows lying whole inside it when its run's rows are adjacent, bound for
    consecutive slots in order (so one slice copy places them), and the run holds at least
    `MIN_RUN_COPY` bytes; rows straddling two requests, and every row of other runs, are left to
    the gather at the end."""
    pieces = plan.offsets.size
    first, count, slot = np.zeros(pieces, np.int64), np.zeros(pieces, np.int64), np.zeros(pieces, np.int64)
    copied = np.zeros(rows.size, dtype=bool)
    if rows.size == 0:
        return RunCopies(first, count, slot, copied)
    cum = np.concatenate([[0], np.cumsum(in_order_breaks(rows, row_slot))])
    run_first, run_stop = plan.run_rows[:-1], plan.run_rows[1:]
    whole = (cum[run_stop - 1] == cum[run_first]) & ((run_stop - run_first) * row_bytes >= MIN_RUN_COPY)
    lo = np.searchsorted(plan.row_at, plan.staging, side="left")  # row_at increases with the sorted rows
    hi = np.searchsorted(plan.row_at + row_bytes, plan.staging + plan.lengths, side="right")
    use = whole[plan.run_of_piece] & (hi > lo)
    first[use], count[use] = lo[use], (hi - lo)[use]
    slot[use] = row_slot[lo[use]]
    marks = np.zeros(rows.size + 1, np.int64)
    np.add.at(marks, lo[use], 1)
    np.add.at(marks, hi[use], -1)
    copied[:] = np.cumsum(marks[:-1]) > 0
    return RunCopies(first, count, slot, copied)
