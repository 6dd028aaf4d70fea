"""The PageRank pull, native (`pull_sum_`) and torch (index_select + segment_reduce), gives the bits of
summing each column in order, at any thread count; the native op refuses bad rows, naming them."""

from __future__ import annotations

import pytest
import torch
from native_backends import BACKENDS, needs_native

from graphtier.service.graph.csc import build_csc
from graphtier.service.hotness.scores import _Pull


@pytest.mark.parametrize("backend", BACKENDS)
def test_pull_is_each_column_summed_in_order_bit_for_bit(backend):
    n = 5000  # skewed degrees, isolated nodes (empty columns)
    gen = torch.Generator().manual_seed(4)
    src = (torch.rand(80_000, generator=gen) ** 3 * (n - 50)).long()
    dst = torch.randint(0, n - 50, (80_000,), generator=gen)
    graph = build_csc(n, src, dst, undirected=True)
    share = torch.rand(n, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1e-3
    # the reference: each column summed in order from 0.0, one float64 addition at a time
    values, colptr, row = share.tolist(), graph.colptr.tolist(), graph.row.tolist()
    expected = torch.empty(n, dtype=torch.float64)
    for v in range(n):
        total = 0.0
        for j in range(colptr[v], colptr[v + 1]):
            total += values[row[j]]
        expected[v] = total
    pull = _Pull(graph, symmetric=True)
    pull.native = backend == "native"
    threads = torch.get_num_threads()
    try:
        for count in (1, 2, 4):  # the columns are split among threads; each is still summed in order
            torch.set_num_threads(count)
            assert torch.equal(pull(share, torch.empty(n, dtype=torch.float64)), expected), count
    finally:
        torch.set_num_threads(threads)


@needs_native
def test_native_pull_refuses_a_row_entry_out_of_range():
    out, share = torch.empty(2, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    with pytest.raises(IndexError, match="row entry 4 at position 2 is out of range"):
        torch.ops.graphtier.pull_sum_(out, share, torch.tensor([0, 2, 3]), torch.tensor([0, 1, 4]))
    with pytest.raises(RuntimeError, match="offsets must run from 0"):
        torch.ops.graphtier.pull_sum_(out, share, torch.tensor([0, 2, 5]), torch.tensor([0, 1, 2]))
