"""Reordering keeps the graph, orders by score, and is a consistent permutation."""

import torch

from graphtier.service.graph import build_csc
from graphtier.service.hotness import reorder_by_score


def _edge_set(graph):
    return set(zip(graph.row.tolist(), graph.dst_of_edges().tolist(), strict=True))


def test_reorder_is_an_isomorphism():
    gen = torch.Generator().manual_seed(0)
    n = 500
    graph = build_csc(n, torch.randint(0, n, (4000,), generator=gen), torch.randint(0, n, (4000,), generator=gen))
    scores = torch.rand(n, generator=gen)
    r = reorder_by_score(graph, scores)
    assert torch.equal(r.old_to_new[r.new_to_old], torch.arange(n))
    assert bool((scores[r.new_to_old][:-1] >= scores[r.new_to_old][1:]).all())
    mapped = {(int(r.new_to_old[u]), int(r.new_to_old[v])) for u, v in _edge_set(r.graph)}
    assert mapped == _edge_set(graph)
    # neighbour lists are copied in place: position j of new node i is position j of old node new_to_old[i]
    for i in (0, 1, 7, 499):
        old = int(r.new_to_old[i])
        new_list = r.graph.row[r.graph.colptr[i] : r.graph.colptr[i + 1]]
        old_list = graph.row[graph.colptr[old] : graph.colptr[old + 1]]
        assert torch.equal(r.new_to_old[new_list], old_list)


def test_ties_keep_source_order():
    graph = build_csc(4, torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0]))
    r = reorder_by_score(graph, torch.tensor([1.0, 2.0, 1.0, 2.0]))
    assert r.new_to_old.tolist() == [1, 3, 0, 2]
