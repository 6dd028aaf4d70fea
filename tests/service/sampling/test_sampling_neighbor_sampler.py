"""NeighborSampler output: the spec-literal reference, graph consistency, blocks, determinism."""

from __future__ import annotations

import pytest
import torch

from graphtier.service.graph.csc import CSCGraph, build_csc
from graphtier.service.sampling import NeighborSampler, SampledSubgraph
from graphtier.service.sampling.counter_rng import GOLDEN, NODE_STRIDE, splitmix64_int

M64 = (1 << 64) - 1


def reference_sample(graph: CSCGraph, seeds: list[int], fanouts: list[int], seed: int) -> SampledSubgraph:
    """The sampling contract written out with Python loops and sets (slow, tiny graphs only)."""
    colptr, row = graph.colptr.tolist(), graph.row.tolist()
    node_ids, local = list(seeds), {g: i for i, g in enumerate(seeds)}
    indptr, indices, nodes_per_hop, edges_per_hop = [0], [], [len(seeds)], []
    f0, f1 = 0, len(seeds)
    seed_key = splitmix64_int(seed & M64)
    for k in fanouts:
        hop_edges = 0
        for local_id in range(f0, f1):
            v = node_ids[local_id]
            s, d = colptr[v], colptr[v + 1] - colptr[v]
            if k == -1 or d <= k:
                offsets = list(range(d))
            else:
                key = splitmix64_int((seed_key + local_id * NODE_STRIDE) & M64)
                chosen: list[int] = []
                for i in range(k):
                    j = d - k + i
                    t = (splitmix64_int((key + i * GOLDEN) & M64) >> 11) % (j + 1)
                    chosen.append(j if t in chosen else t)
                offsets = sorted(chosen)
            for o in offsets:
                u = row[s + o]
                if u not in local:
                    local[u] = len(node_ids)
                    node_ids.append(u)
                indices.append(local[u])
            indptr.append(len(indices))
            hop_edges += len(offsets)
        nodes_per_hop.append(len(node_ids) - f1)
        edges_per_hop.append(hop_edges)
        f0, f1 = f1, len(node_ids)
    return SampledSubgraph(
        torch.tensor(node_ids),
        torch.tensor(indptr),
        torch.tensor(indices, dtype=torch.int64),
        nodes_per_hop,
        edges_per_hop,
    )


def max_or(t: torch.Tensor, default: int) -> int:
    return int(t.max()) if t.numel() else default


def assert_same(a: SampledSubgraph, b: SampledSubgraph) -> None:
    assert torch.equal(a.node_ids, b.node_ids)
    assert torch.equal(a.indptr, b.indptr)
    assert torch.equal(a.indices, b.indices)
    assert a.num_nodes_per_hop == b.num_nodes_per_hop
    assert a.num_edges_per_hop == b.num_edges_per_hop


@pytest.mark.parametrize("fanouts", [[3, 2], [5, -1], [1, 1, 1]])
def test_torch_backend_matches_reference(graph: CSCGraph, fanouts: list[int]) -> None:
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(4))[:20]
    sampler = NeighborSampler(graph, fanouts, backend="torch")
    for seed in (0, 99):
        assert_same(sampler.sample(seeds, seed=seed), reference_sample(graph, seeds.tolist(), fanouts, seed))


def test_sample_is_consistent_with_graph(graph: CSCGraph) -> None:
    fanouts = [4, 3, 2]
    sampler = NeighborSampler(graph, fanouts)
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(1))[:25]
    sub = sampler.sample(seeds, seed=3)
    assert torch.equal(sub.node_ids[:25], seeds)
    assert sub.node_ids.unique().numel() == sub.num_nodes  # relabelled nodes are distinct
    assert sum(sub.num_nodes_per_hop) == sub.num_nodes and sum(sub.num_edges_per_hop) == sub.num_edges
    src_local, dst_local = sub.edge_index()
    src, dst = sub.node_ids[src_local], sub.node_ids[dst_local]
    edge_keys = set((graph.dst_of_edges() * graph.num_nodes + graph.row).tolist())
    assert set((dst * graph.num_nodes + src).tolist()) <= edge_keys  # every sampled edge exists
    pairs = dst_local * sub.num_nodes + src_local
    assert pairs.unique().numel() == pairs.numel()  # no neighbour drawn twice for one destination
    degree = graph.in_degree()[sub.node_ids[: sub.indptr.numel() - 1]]
    fanout_of = torch.repeat_interleave(torch.tensor(fanouts), torch.tensor(sub.num_nodes_per_hop[:-1]))
    assert torch.equal(sub.indptr.diff(), torch.minimum(degree, fanout_of))
    # hop semantics: hop i's destinations are exactly the nodes discovered at hop i-1
    bounds = torch.tensor([0] + sub.num_nodes_per_hop[:-1]).cumsum(0)
    for hop in range(len(fanouts)):
        lo, hi = int(bounds[hop]), int(bounds[hop + 1])
        first_edge, last_edge = int(sub.indptr[lo]), int(sub.indptr[hi])
        assert last_edge - first_edge == sub.num_edges_per_hop[hop]
        known_after_hop = int(bounds[hop + 1]) + sub.num_nodes_per_hop[hop + 1]
        assert max_or(sub.indices[first_edge:last_edge], -1) < known_after_hop


def test_new_nodes_are_numbered_in_first_occurrence_order(graph: CSCGraph) -> None:
    sub = NeighborSampler(graph, [6, 6]).sample(torch.arange(0, graph.num_nodes, 7), seed=5)
    seen = set(range(sub.num_seeds))
    next_id = sub.num_seeds
    for i in sub.indices.tolist():
        if i not in seen:
            assert i == next_id
            seen.add(i)
            next_id += 1
    assert next_id == sub.num_nodes


def test_blocks_are_prefix_views() -> None:
    graph = build_csc(8, torch.tensor([1, 2, 3, 4, 5, 6, 7, 0, 3]), torch.tensor([0, 0, 1, 2, 3, 4, 5, 6, 7]))
    sub = NeighborSampler(graph, [-1, -1, -1]).sample(torch.tensor([0]), seed=0)
    # in-neighbours: 0 <- {1, 2}, 1 <- 3, 2 <- 4, 3 <- 5, 4 <- 6
    assert sub.node_ids.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert sub.num_nodes_per_hop == [1, 2, 2, 2] and sub.num_edges_per_hop == [2, 2, 2]
    assert sub.indptr.tolist() == [0, 2, 3, 4, 5, 6] and sub.indices.tolist() == [1, 2, 3, 4, 5, 6]
    blocks = sub.blocks()
    assert [(b.num_dst, b.num_src, b.num_edges) for b in blocks] == [(5, 7, 6), (3, 5, 4), (1, 3, 2)]
    assert blocks[-1].edge_index().tolist() == [[1, 2], [0, 0]]
    assert blocks[0].edge_index().tolist() == sub.edge_index().tolist()
    for b in blocks:
        assert b.indices.data_ptr() == sub.indices.data_ptr() and b.indptr.data_ptr() == sub.indptr.data_ptr()
    for inner, outer in zip(
        blocks[1:], blocks[:-1], strict=True
    ):  # each layer's dst nodes are the next layer's src prefix
        assert inner.num_src == outer.num_dst


def test_blocks_on_random_graph(graph: CSCGraph) -> None:
    sub = NeighborSampler(graph, [5, 4, 3]).sample(torch.arange(10), seed=1)
    blocks = sub.blocks()
    assert len(blocks) == 3 and blocks[-1].num_dst == 10
    for b in blocks:
        assert b.indptr.numel() == b.num_dst + 1 and int(b.indptr[-1]) == b.num_edges
        ei = b.edge_index()
        assert ei.shape == (2, b.num_edges)
        assert max_or(ei[0], -1) < b.num_src and max_or(ei[1], -1) < b.num_dst


def test_deterministic_under_seed_and_different_under_another(graph: CSCGraph) -> None:
    sampler = NeighborSampler(graph, [3, 3])
    seeds = torch.arange(0, graph.num_nodes, 3)
    a, b, c = sampler.sample(seeds, seed=11), sampler.sample(seeds, seed=11), sampler.sample(seeds, seed=12)
    assert_same(a, b)
    assert not (torch.equal(a.node_ids, c.node_ids) and torch.equal(a.indices, c.indices))


def test_isolated_and_empty_inputs() -> None:
    graph = build_csc(5, torch.tensor([0]), torch.tensor([1]))
    sub = NeighborSampler(graph, [2, 2]).sample(torch.tensor([3, 1]), seed=0)
    assert sub.node_ids.tolist() == [3, 1, 0] and sub.indptr.tolist() == [0, 0, 1, 1]
    assert sub.num_nodes_per_hop == [2, 1, 0] and sub.num_edges_per_hop == [1, 0]
    empty = NeighborSampler(graph, [2]).sample(torch.empty(0, dtype=torch.int64), seed=0)
    assert empty.num_nodes == 0 and empty.indptr.tolist() == [0] and empty.blocks()[0].num_dst == 0
