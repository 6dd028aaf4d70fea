"""The C++/OpenMP sampler returns exactly the pure-torch sampler's output."""

from __future__ import annotations

import pytest
import torch
from sampling_graphs import random_graph

from graphtier.service.graph.csc import CSCGraph
from graphtier.service.sampling import NeighborSampler

pytestmark = pytest.mark.usefixtures("needs_native")


def assert_identical(graph: CSCGraph, fanouts: list[int], seeds: torch.Tensor, seed: int) -> None:
    a = NeighborSampler(graph, fanouts, backend="native").sample(seeds, seed=seed)
    b = NeighborSampler(graph, fanouts, backend="torch").sample(seeds, seed=seed)
    assert torch.equal(a.node_ids, b.node_ids)
    assert torch.equal(a.indptr, b.indptr)
    assert torch.equal(a.indices, b.indices)
    assert a.num_nodes_per_hop == b.num_nodes_per_hop
    assert a.num_edges_per_hop == b.num_edges_per_hop


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [2, -1], [-1], [1, 1, 1, 1], [40, 3]])
@pytest.mark.parametrize("seed", [0, 7, 2**64 - 1, -5])
def test_native_equals_torch(graph: CSCGraph, fanouts: list[int], seed: int) -> None:
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(seed % 1000))[:50]
    assert_identical(graph, fanouts, seeds, seed)


def test_native_equals_torch_with_large_fanout_and_many_threads() -> None:
    # fanouts above the C++ linear-scan limit use its bitmap path; frontiers large enough to run in parallel
    graph = random_graph(20000, 400000, 3, isolated=100)
    seeds = torch.randperm(20000, generator=torch.Generator().manual_seed(0))[:3000]
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            assert_identical(graph, [50, 33], seeds, 1234)
    finally:
        torch.set_num_threads(before)


def test_native_node_map_is_reset_between_calls(graph: CSCGraph) -> None:
    sampler = NeighborSampler(graph, [4, 4], backend="native")
    first = sampler.sample(torch.arange(5), seed=1)
    sampler.sample(torch.arange(5, 40), seed=2)
    again = sampler.sample(torch.arange(5), seed=1)
    assert torch.equal(first.node_ids, again.node_ids) and torch.equal(first.indices, again.indices)
