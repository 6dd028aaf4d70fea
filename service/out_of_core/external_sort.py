"""The CSC structure built out of core: a counting sort of the edge list by destination.

Same result as `graph.csc.build_csc` (the sorted distinct keys `dst * N + src`, cut into
columns), in three passes over the edge stream's chunks:

1. count every destination's incoming entries (duplicates and reverse edges included);
2. cut the destinations into contiguous ranges ("buckets") whose entries fit the working
   memory, and put every key in its bucket: when all keys fit in memory, into the bucket's
   region of one key array (its size is known from the counts), else appended to the
   bucket's spill file;
3. per bucket, in destination order: sort its keys, drop duplicates and keep each key's source
   (the row), counting the column lengths. In memory, each bucket is compacted in place to the
   end of the row built so far, so the keys become the row without a second array.

The passes over the keys are `csc_passes` (native loops, or numpy). `DiskCSC` is the result:
colptr in memory, row in memory or in a spill file read column range by column range.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.graph.streamed import FileEdges, TensorEdges
from graphtier.service.out_of_core.csc_passes import bucket_of, compact_keys, count_entries, scatter_keys
from graphtier.service.out_of_core.memory_budget import MemoryPlan
from graphtier.service.out_of_core.spill import BucketSpill, MemoryArray, SpillArray, new_array

DISTRIBUTE_BYTES_PER_EDGE = 112  # an edge chunk: ids read and relabelled, two keys, bucket ids, grouping
SORT_BYTES_PER_KEY = 28  # a bucket: keys, dedup mask, distinct keys, destination, a product (24 measured)
SCAN_BYTES_PER_EDGE = 32  # a column range read for scoring: row, expanded shares
MAX_CHUNK = 1 << 22
KEYS_IN_MEMORY_SHARE = 0.6  # of the working memory, at most, for all keys held at once (the chunk takes 0.2)
MAX_KEYED_NODES = 3_037_000_499  # the most nodes N for which every key dst * N + src fits in int64
MAX_MEMORY_BUCKETS = 64  # keys held in memory only when buckets of at least total/64 keys can be sorted beside them


def column_ranges(colptr: torch.Tensor, max_edges: int) -> list[tuple[int, int]]:
    """Consecutive column ranges [v0, v1) holding at most `max_edges` entries each (one longer column alone)."""
    offsets = colptr.numpy()
    num_columns = offsets.size - 1
    ranges, v = [], 0
    while v < num_columns:
        w = int(np.searchsorted(offsets, offsets[v] + max_edges, side="right")) - 1
        w = min(max(w, v + 1), num_columns)
        ranges.append((v, w))
        v = w
    return ranges


class DiskCSC:
    """A CSC graph whose `row` is a spill file; walks it in column ranges of at most `chunk_edges` entries."""

    def __init__(self, colptr: torch.Tensor, row: SpillArray | MemoryArray, chunk_edges: int) -> None:
        self.colptr, self.row, self.chunk_edges = colptr, row, chunk_edges

    @property
    def num_nodes(self) -> int:
        return self.colptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return int(self.colptr[-1])

    def in_degree(self) -> torch.Tensor:
        return self.colptr[1:] - self.colptr[:-1]

    def column_chunks(self, max_edges: int | None = None) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(v0, v1, sources of the edges into columns v0..v1-1), range after range. A row read from
        disk lands in one buffer reused for every range: use each before asking for the next."""
        ranges = column_ranges(self.colptr, max_edges or self.chunk_edges)
        longest = max((int(self.colptr[v1] - self.colptr[v0]) for v0, v1 in ranges), default=0)
        buffer = np.empty(longest, np.int64) if isinstance(self.row, SpillArray) else None
        for v0, v1 in ranges:
            yield v0, v1, torch.from_numpy(self.row.read(int(self.colptr[v0]), int(self.colptr[v1]), buffer))

    def out_degree(self) -> torch.Tensor:
        degree = torch.zeros(self.num_nodes, dtype=torch.int64)
        for _, _, row in self.column_chunks():
            degree += torch.bincount(row, minlength=self.num_nodes)
        return degree

    def release(self) -> None:
        self.row.delete()


def _count_entries(edges: TensorEdges | FileEdges, num_nodes: int, undirected: bool, chunk: int) -> torch.Tensor:
    """Entries per destination. Relabelled edges are counted by their stored ids and the counts
    relabelled once, instead of relabelling every edge."""
    relabel = edges.relabel if isinstance(edges, FileEdges) else None
    ends: Iterator[tuple[np.ndarray, np.ndarray]]
    if isinstance(edges, FileEdges) and relabel is not None:
        ends = edges.raw_chunks(chunk)
    else:
        ends = ((s.numpy(), d.numpy()) for s, d in edges.chunks(chunk))
    counts = np.zeros(num_nodes, dtype=np.int64)
    for src, dst in ends:
        count_entries(counts, dst)
        if undirected:
            count_entries(counts, src)
    if relabel is None:
        return torch.from_numpy(counts)
    relabelled = torch.empty(num_nodes, dtype=torch.int64)
    relabelled[relabel] = torch.from_numpy(counts)
    return relabelled


def _scatter_in_memory(
    edges: TensorEdges | FileEdges,
    num_nodes: int,
    undirected: bool,
    chunk: int,
    entry_ptr: torch.Tensor,
    buckets: list[tuple[int, int]],
    starts: np.ndarray,
) -> np.ndarray:
    """Every entry's key in one array, bucket b's in its region [entry_ptr[v0], entry_ptr[v1])."""
    keys = np.empty(int(entry_ptr[-1]), dtype=np.int64)
    cursor = np.array([int(entry_ptr[v0]) for v0, _ in buckets], dtype=np.int64)
    limit = np.array([int(entry_ptr[v1]) for _, v1 in buckets], dtype=np.int64)
    relabel = edges.relabel if isinstance(edges, FileEdges) else None
    if relabel is not None and num_nodes <= np.iinfo(np.int32).max:
        relabel = relabel.to(torch.int32)  # looked up edge by edge: int32 halves the table the lookups miss in
    pairs: Iterator[tuple[torch.Tensor, torch.Tensor]]
    if isinstance(edges, FileEdges):  # the stored ids (any integer width), relabelled as they are scattered
        pairs = ((torch.from_numpy(src), torch.from_numpy(dst)) for src, dst in edges.raw_chunks(chunk))
    else:
        pairs = edges.chunks(chunk)
    for src, dst in pairs:
        scatter_keys(
            keys,
            cursor,
            limit,
            dst,
            src,
            num_nodes=num_nodes,
            relabel=relabel,
            bucket_starts=starts,
            both_ways=undirected,
        )
    edges.release()
    if not np.array_equal(cursor, limit):
        short = int(np.flatnonzero(cursor != limit)[0])
        raise RuntimeError(
            f"CSC build: bucket {short} got {cursor[short] - int(entry_ptr[buckets[short][0]])} keys "
            f"but {limit[short] - int(entry_ptr[buckets[short][0]])} entries were counted "
            "(the edge source changed between its passes)"
        )
    return keys


def build_csc_external(
    edges: TensorEdges | FileEdges, num_nodes: int, *, undirected: bool, spill_dir: Path, plan: MemoryPlan
) -> tuple[DiskCSC, dict[str, object]]:
    """The deduplicated CSC of `edges` (plus every reverse edge when `undirected`), see the module docstring."""
    n = num_nodes
    if n > MAX_KEYED_NODES:
        raise GraphtierError(
            f"{n} nodes: the CSC build keys an entry as destination * N + source in int64, "
            f"which holds at most {MAX_KEYED_NODES} nodes"
        )
    plan.refresh()
    chunk = plan.units(DISTRIBUTE_BYTES_PER_EDGE, share=0.2, cap=MAX_CHUNK)
    entries = _count_entries(edges, n, undirected, chunk)
    total = int(entries.sum())
    # Every key (8 bytes an entry) held in memory when that leaves room to distribute them and to
    # sort buckets of a useful size: no spill file, and the row replaces the keys bucket by bucket.
    # Else buckets small enough that the row can stay in memory beside one, when that still leaves
    # half the memory to the buckets; else the largest buckets that fit.
    room = int((plan.work_bytes - 8 * total) // SORT_BYTES_PER_KEY)
    keys_in_memory = 8 * total <= KEYS_IN_MEMORY_SHARE * plan.work_bytes and room * MAX_MEMORY_BUCKETS >= total
    keep_row = 8 * total <= 0.5 * plan.work_bytes
    per_bucket = max(1, room) if keys_in_memory or keep_row else plan.units(SORT_BYTES_PER_KEY, share=0.8)
    entry_ptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(entries, 0, out=entry_ptr[1:])
    del entries
    buckets = column_ranges(entry_ptr, per_bucket)
    starts = np.array([v0 for v0, _ in buckets], dtype=np.int64)  # each bucket's first column
    degree = np.zeros(n, dtype=np.int64)
    keys_in_memory = keys_in_memory or len(buckets) == 1
    spilled_bytes = 0
    if keys_in_memory:
        # one key array; each bucket sorted and compacted in place, the row growing in front of them
        keys = _scatter_in_memory(edges, n, undirected, chunk, entry_ptr, buckets, starts)
        kept = 0
        for v0, v1 in buckets:
            start, stop = int(entry_ptr[v0]), int(entry_ptr[v1])
            keys[start:stop].sort()
            kept += compact_keys(keys, start, stop, kept, num_nodes=n, first_column=v0, degree=degree[v0:v1])
        keys.resize(kept, refcheck=False)  # the repeats' tail given back (glibc shrinks the mapping in place)
        row: SpillArray | MemoryArray = MemoryArray.holding(keys)
        row_in_memory = True
    else:
        spill = BucketSpill(spill_dir, "csc-keys", len(buckets), {"key": (np.int64, ())})
        for src, dst in edges.chunks(chunk):
            for owner, other in ((dst, src), (src, dst)) if undirected else ((dst, src),):
                spill.add(bucket_of(starts, owner.numpy()), key=owner * n + other)
        edges.release()
        spilled_bytes = spill.bytes_written
        # the row stays in memory when it fits beside the sort of the largest bucket
        plan.refresh()
        largest = max(int(entry_ptr[v1] - entry_ptr[v0]) for v0, v1 in buckets)
        row_in_memory = plan.fits(8 * total + SORT_BYTES_PER_KEY * largest)
        row = new_array(Path(spill_dir) / "csc-row.i64", np.int64, capacity=total, in_memory=row_in_memory)
        for b, (v0, v1) in enumerate(buckets):
            keys = spill.take(b)["key"]
            keys.sort()
            row.append(keys[: compact_keys(keys, 0, keys.size, 0, num_nodes=n, first_column=v0, degree=degree[v0:v1])])
            del keys
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    torch.cumsum(torch.from_numpy(degree), 0, out=colptr[1:])
    stats: dict[str, object] = {
        "entries": total,
        "buckets": len(buckets),
        "spilled_bytes": spilled_bytes,
        "keys_in_memory": keys_in_memory,
        "row_in_memory": row_in_memory,
    }
    plan.refresh()
    return DiskCSC(colptr, row, plan.units(SCAN_BYTES_PER_EDGE, share=0.5, cap=4 * MAX_CHUNK)), stats
