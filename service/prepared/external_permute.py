"""Applying the hotness permutation out of core: structure and features, written front to back.

Both are one primitive, `ExternalScatter`: rows arrive in source order with the position
each takes in the output; they are appended to the spill file of the output range
("bucket") they fall in, then each bucket is loaded, placed into a buffer and written, in
order, to the dataset file. Every read and write of the data is sequential, so it runs at
disk speed even when the data is many times the memory. When the whole output fits the
working memory it is placed into one buffer directly and nothing is spilled. The structure,
when the old `row` is in memory, is gathered instead (`_gather_structure`): no buffer at all.

The structure is the permutation of `hotness.reorder.permute_csc`: the entries of old
column v move, in their order, to new column `old_to_new[v]`, so an entry's new position
is the new column's start plus its offset inside the old column, and its value is the
relabelled source `old_to_new[u]`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike

from graphtier.service.graph.streamed import FeatureRows
from graphtier.service.hotness.reorder import gather_new_rows
from graphtier.service.out_of_core.external_sort import DiskCSC, column_ranges
from graphtier.service.out_of_core.memory_budget import MemoryPlan
from graphtier.service.out_of_core.prefault import PrefaultedBuffer
from graphtier.service.out_of_core.spill import BucketSpill, MemoryArray, as_numpy
from graphtier.service.prepared.npy_io import NpyStreamWriter

CHUNK_SHARE = 0.2  # of the working memory at most, for the chunk being distributed
STRUCTURE_CHUNK_BYTES = 96  # per entry: row, expanded offsets, positions, values, bucket ids, grouping
MAX_CHUNK = 1 << 22  # entries; larger chunks only take memory from the buckets
GATHER_CHUNK = 1 << 21  # entries per gathered range: 16 MiB arrays, reused from the heap rather than mapped afresh


class ExternalScatter:
    """`out[positions] = values` for a permutation of `num_rows` rows, written in order to an `NpyStreamWriter`."""

    def __init__(
        self, spill_dir: Path, name: str, num_rows: int, row_shape: tuple[int, ...], dtype: DTypeLike, work_bytes: int
    ) -> None:
        self.num_rows, self.row_shape, self.dtype = num_rows, tuple(row_shape), np.dtype(dtype)
        row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        # a bucket is loaded (values + 4-byte positions) and placed into a buffer of its rows
        self.rows_per_bucket = max(1, int(work_bytes // (2 * row_bytes + 4)))
        self.num_buckets = max(1, math.ceil(num_rows / self.rows_per_bucket))
        if num_rows * row_bytes <= work_bytes:  # the whole output fits: placed directly, nothing spilled
            self.num_buckets, self.rows_per_bucket = 1, max(1, num_rows)
        # the whole output's pages are faulted in by a thread while the first rows are computed (`prefault`)
        self._target = (
            PrefaultedBuffer((num_rows, *self.row_shape), self.dtype, background=True)
            if self.num_buckets == 1
            else None
        )
        self.buffer = self._target.array if self._target is not None else None
        fields = {"pos": (np.dtype(np.int32), ()), "value": (self.dtype, self.row_shape)}
        self.spill = None if self.buffer is not None else BucketSpill(spill_dir, name, self.num_buckets, fields)

    def close(self) -> None:
        """Stop faulting in the output buffer's pages (on an error, or once every row is placed)."""
        if self._target is not None:
            self._target.close()

    def add(self, positions: torch.Tensor, values: torch.Tensor | np.ndarray) -> None:
        if self.buffer is not None:
            self.buffer[as_numpy(positions)] = as_numpy(values)
            return
        assert self.spill is not None  # no buffer: the rows are spilled
        bucket = positions // self.rows_per_bucket
        local = (positions - bucket * self.rows_per_bucket).to(torch.int32)
        self.spill.add(bucket.numpy(), pos=local, value=values)

    def finish(self, out: NpyStreamWriter) -> dict[str, int | str]:
        if self.buffer is not None:
            self.close()
            out.write(self.buffer)
            self.buffer = self._target = None
            return {"buckets": 1, "spilled_bytes": 0}
        assert self.spill is not None  # no buffer: the rows were spilled
        for b in range(self.num_buckets):
            records = self.spill.take(b)
            count = min(self.rows_per_bucket, self.num_rows - b * self.rows_per_bucket)
            if records["pos"].size != count:
                raise RuntimeError(f"bucket {b} of {out.path.name} got {records['pos'].size} rows, expected {count}")
            block = PrefaultedBuffer((count, *self.row_shape), self.dtype).array
            block[records["pos"]] = records["value"]
            del records
            out.write(block)
            del block  # before the next bucket is loaded, not after
        return {"buckets": self.num_buckets, "spilled_bytes": self.spill.bytes_written}


def new_colptr(csc: DiskCSC, new_to_old: torch.Tensor) -> torch.Tensor:
    colptr = torch.zeros_like(csc.colptr)
    torch.cumsum(torch.index_select(csc.in_degree(), 0, new_to_old), 0, out=colptr[1:])
    return colptr


def permute_structure(
    csc: DiskCSC,
    colptr: torch.Tensor,
    new_to_old: torch.Tensor,
    old_to_new: torch.Tensor,
    out: NpyStreamWriter,
    spill_dir: Path,
    plan: MemoryPlan,
) -> dict[str, int | str]:
    """Write the reordered `row` (see the module docstring) to `out`; `colptr` is the new one."""
    if isinstance(csc.row, MemoryArray):
        return _gather_structure(csc, colptr, new_to_old, old_to_new, out)
    in_degree = csc.in_degree()
    shift = colptr[:-1][old_to_new] - csc.colptr[:-1]  # new start - old start, per old column
    plan.refresh()
    chunk = plan.units(STRUCTURE_CHUNK_BYTES, share=CHUNK_SHARE, cap=MAX_CHUNK)
    work = plan.work_bytes - chunk * STRUCTURE_CHUNK_BYTES
    scatter = ExternalScatter(spill_dir, "row", csc.num_edges, (), np.int64, work)
    try:
        for v0, v1, row in csc.column_chunks(chunk):
            first = int(csc.colptr[v0])
            positions = shift[v0:v1].repeat_interleave(in_degree[v0:v1], output_size=row.numel())
            positions += torch.arange(first, first + row.numel())
            scatter.add(positions, torch.index_select(old_to_new, 0, row))
        return scatter.finish(out)
    finally:
        scatter.close()


def _gather_structure(
    csc: DiskCSC, colptr: torch.Tensor, new_to_old: torch.Tensor, old_to_new: torch.Tensor, out: NpyStreamWriter
) -> dict[str, int | str]:
    """The reordered `row` when the old one is in memory: gathered new column by new column and
    written as it goes (as `hotness.reorder.permute_csc` does), instead of scattered into a buffer
    of the whole output. The random accesses are reads of whole old columns, not writes of them."""
    old_row = torch.from_numpy(csc.row.read(0, csc.num_edges))
    shift = torch.index_select(csc.colptr[:-1], 0, new_to_old)
    shift -= colptr[:-1]  # old start - new start, per new column
    new_degree = colptr[1:] - colptr[:-1]
    for i0, i1 in column_ranges(colptr, GATHER_CHUNK):
        first, last = int(colptr[i0]), int(colptr[i1])
        out.write(gather_new_rows(old_row, old_to_new, shift[i0:i1], new_degree[i0:i1], first, last))
    return {"method": "gather", "buckets": 1, "spilled_bytes": 0}


def permute_rows(
    rows: FeatureRows, old_to_new: torch.Tensor, out: NpyStreamWriter, spill_dir: Path, plan: MemoryPlan
) -> dict[str, int | str]:
    """Write `rows[new_to_old]` (row i of the output is source row new_to_old[i]) to `out`."""
    row_bytes = np.dtype(rows.dtype).itemsize * int(np.prod(rows.row_shape, dtype=np.int64))
    plan.refresh(transient_per_node=8)  # only slices of old_to_new
    chunk = plan.units(3 * row_bytes + 24, share=CHUNK_SHARE, cap=max(1, (64 << 20) // row_bytes))
    work = plan.work_bytes - chunk * (3 * row_bytes + 24)
    scatter = ExternalScatter(spill_dir, "features", rows.num_rows, rows.row_shape, rows.dtype, work)
    try:
        for start, block in rows.chunks(chunk):
            scatter.add(old_to_new[start : start + block.shape[0]], block)
        return scatter.finish(out)
    finally:
        scatter.close()
