"""The CSC build's passes (`csc_passes`): native loops and numpy agree, and with `graph.csc.build_csc`;
bad input to the native loops is refused, naming it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from native_backends import BACKENDS, needs_native

from graphtier.contract.errors import GraphtierError
from graphtier.service.graph.csc import build_csc
from graphtier.service.graph.streamed import FileEdges, TensorEdges
from graphtier.service.out_of_core import csc_passes
from graphtier.service.out_of_core.csc_passes import compact_keys, count_entries, scatter_keys
from graphtier.service.out_of_core.external_sort import build_csc_external
from graphtier.service.out_of_core.memory_budget import MemoryPlan
from graphtier.service.out_of_core.spill import MemoryArray, SpillArray


def skewed_edges(n: int, e: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Edges with a few hot nodes, repeats and self loops: what a real edge list has."""
    gen = torch.Generator().manual_seed(seed)
    src = (torch.rand(e, generator=gen) ** 3 * n).long().clamp(max=n - 1)
    dst = torch.randint(0, n, (e,), generator=gen)
    return src, dst


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_count_entries_matches_bincount(backend, dtype):
    ids = np.random.default_rng(1).integers(0, 500, 20_000).astype(dtype)
    counts = np.full(500, 3, np.int64)
    count_entries(counts, ids, backend=backend)
    assert np.array_equal(counts, 3 + np.bincount(ids, minlength=500))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_buckets", [1, 3, 40])  # 40: past the linear bucket search, a binary one
@pytest.mark.parametrize("relabel_dtype", [None, torch.int32, torch.int64])
def test_scatter_keys_fills_each_bucket_with_its_keys(backend, num_buckets, relabel_dtype):
    n, both_ways = 997, True
    src, dst = skewed_edges(n, 30_000, seed=num_buckets)
    relabel = (
        None
        if relabel_dtype is None
        else torch.randperm(n, generator=torch.Generator().manual_seed(5)).to(relabel_dtype)
    )
    a, b = (dst, src) if relabel is None else (relabel[dst].long(), relabel[src].long())
    expected = np.concatenate([(a * n + b).numpy(), (b * n + a).numpy()])
    starts = np.unique(np.linspace(0, n, num_buckets, endpoint=False).astype(np.int64))
    column_of = expected // n
    bucket = np.searchsorted(starts, column_of, side="right") - 1
    sizes = np.bincount(bucket, minlength=starts.size)
    limit = np.cumsum(sizes)
    cursor = limit - sizes
    keys = np.full(expected.size, -1, np.int64)
    # in two chunks, int32 ids, as the build feeds it
    for part in (slice(0, 12_345), slice(12_345, None)):
        scatter_keys(
            keys,
            cursor,
            limit,
            dst[part].to(torch.int32),
            src[part].to(torch.int32),
            num_nodes=n,
            relabel=relabel,
            bucket_starts=starts,
            both_ways=both_ways,
            backend=backend,
        )
    assert np.array_equal(cursor, limit)
    for k in range(starts.size):
        region = keys[limit[k] - sizes[k] : limit[k]]
        assert np.array_equal(np.sort(region), np.sort(expected[bucket == k]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_keys_refuses_to_overfill_a_bucket(backend):
    keys, cursor, limit = np.zeros(4, np.int64), np.array([0], np.int64), np.array([3], np.int64)
    ids = torch.tensor([1, 2], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="bucket 0 is full"):
        scatter_keys(
            keys,
            cursor,
            limit,
            ids,
            ids,
            num_nodes=5,
            relabel=None,
            bucket_starts=np.array([0]),
            both_ways=True,
            backend=backend,
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_compact_keys_drops_repeats_and_counts_columns_in_place(backend):
    n = 50
    keys = np.array([999, 999, 999] + sorted([3 * n + 4, 3 * n + 4, 3 * n + 9, 5 * n + 0, 5 * n + 0, 5 * n + 49]))
    degree = np.zeros(4, np.int64)  # columns 2..5
    kept = compact_keys(keys, 3, keys.size, 1, num_nodes=n, first_column=2, degree=degree, backend=backend)
    assert kept == 4
    assert keys[:1].tolist() == [999] and keys[1:5].tolist() == [4, 9, 0, 49]
    assert degree.tolist() == [0, 2, 0, 2]
    empty = compact_keys(keys, 9, 9, 5, num_nodes=n, first_column=2, degree=degree, backend=backend)
    assert empty == 0 and degree.tolist() == [0, 2, 0, 2]
    with pytest.raises(ValueError, match="would overwrite keys not yet read"):
        compact_keys(keys, 2, 4, 3, num_nodes=n, first_column=2, degree=degree, backend=backend)


@needs_native
def test_native_passes_name_the_bad_value():
    counts = np.zeros(10, np.int64)
    with pytest.raises(IndexError, match="id 10 at position 2 is out of range"):
        count_entries(counts, np.array([1, 2, 10], np.int32), backend="native")
    with pytest.raises(IndexError, match="id -1 at position 0 is out of range"):
        scatter_keys(
            np.zeros(4, np.int64),
            np.array([0]),
            np.array([4]),
            torch.tensor([-1]),
            torch.tensor([1]),
            num_nodes=10,
            relabel=None,
            bucket_starts=np.array([0]),
            both_ways=False,
            backend="native",
        )
    with pytest.raises(IndexError, match=r"relabel\[1\] = 12"):
        scatter_keys(
            np.zeros(4, np.int64),
            np.array([0]),
            np.array([4]),
            torch.tensor([1]),
            torch.tensor([0]),
            num_nodes=3,
            relabel=torch.tensor([0, 12, 2]),
            bucket_starts=np.array([0]),
            both_ways=False,
            backend="native",
        )
    unsorted = np.array([7, 5], np.int64)
    with pytest.raises(RuntimeError, match="keys must be sorted"):
        compact_keys(unsorted, 0, 2, 0, num_nodes=10, first_column=0, degree=np.zeros(1, np.int64), backend="native")
    negative = np.array([-1, 3], np.int64)
    with pytest.raises(RuntimeError, match="keys must be non-negative: key -1 at position 0"):
        compact_keys(negative, 0, 2, 0, num_nodes=10, first_column=0, degree=np.zeros(1, np.int64), backend="native")
    outside = np.array([25], np.int64)  # column 2 of a 1-column bucket starting at column 0
    with pytest.raises(RuntimeError, match="is in column 2, outside"):
        compact_keys(outside, 0, 1, 0, num_nodes=10, first_column=0, degree=np.zeros(1, np.int64), backend="native")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("undirected", [False, True])
@pytest.mark.parametrize(
    "work_bytes", [64 << 20, 2 << 20, 512 << 10], ids=["one-bucket", "buckets-in-memory", "spilled"]
)
def test_build_csc_external_equals_build_csc(tmp_path, monkeypatch, backend, undirected, work_bytes):
    """Every way the budget can steer the build gives `build_csc`'s graph, with either backend: keys
    in one bucket, in many buckets of one array, or in bucket spill files; edges in memory, or
    relabelled from files in memory or on disk (read chunk after chunk into reused buffers)."""
    monkeypatch.setattr(csc_passes, "_native", lambda _backend: backend == "native")
    n = 4000
    src, dst = skewed_edges(n, 60_000, seed=3)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    expected = build_csc(n, src, dst, undirected=undirected)
    relabel = torch.randperm(n, generator=torch.Generator().manual_seed(8))
    in_memory = [MemoryArray(np.int32, capacity=src.numel()) for _ in range(2)]
    on_disk = [SpillArray(tmp_path / f"edges.{k}", np.int32) for k in range(2)]
    for file, ids in zip(in_memory + on_disk, (src, dst, src, dst), strict=True):
        file.append(ids.to(torch.int32))
    relabelled = build_csc(n, relabel[src], relabel[dst], undirected=undirected)
    for edges, want in (
        (TensorEdges(src, dst), expected),
        (FileEdges(*in_memory, relabel), relabelled),
        (FileEdges(*on_disk, relabel), relabelled),
    ):
        plan = MemoryPlan.start(1 << 40, work_bytes=work_bytes)
        csc, stats = build_csc_external(edges, n, undirected=undirected, spill_dir=tmp_path, plan=plan)
        assert torch.equal(csc.colptr, want.colptr)
        assert np.array_equal(csc.row.read(0, csc.num_edges), want.row.numpy())
        expected_layout = {64 << 20: (1, True), 2 << 20: (None, True), 512 << 10: (None, False)}[work_bytes]
        assert stats["keys_in_memory"] == expected_layout[1], stats
        assert (stats["buckets"] == 1) == (expected_layout[0] == 1), stats
        csc.release()
    with pytest.raises(GraphtierError, match="3037000499 nodes"):
        build_csc_external(
            TensorEdges(src, dst),
            3_037_000_500,
            undirected=False,
            spill_dir=tmp_path,
            plan=MemoryPlan.start(1 << 40, work_bytes=work_bytes),
        )
