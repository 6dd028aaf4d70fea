"""Sampling and aggregation on the reordered graph equal the original's under the permutation."""

import pytest
import torch

from graphtier.service.graph import build_csc
from graphtier.service.hotness import ScoreSpec, compute_scores, reorder_by_score
from graphtier.service.sampling import NeighborSampler
from graphtier.service.sources.synthetic import generate_rmat


def mean_aggregate(sub, features):
    """A parameter-free L-layer GNN: each layer averages a node's sampled in-neighbours and itself."""
    h = features[sub.node_ids].double()
    for block in sub.blocks():
        dst = torch.repeat_interleave(torch.arange(block.num_dst), block.indptr.diff())
        total = h[: block.num_dst].clone().index_add_(0, dst, h[block.indices])
        h = total / (block.indptr.diff().unsqueeze(1) + 1)
    return h


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_reordered_sample_is_the_original_sample_relabelled(backend):
    g = generate_rmat(scale=11, feature_dim=4)
    graph = build_csc(g.num_nodes, g.src, g.dst, undirected=True)
    r = reorder_by_score(graph, compute_scores(graph, ScoreSpec(kind="wrpr"), train_ids=g.splits["train"]))
    features_new = g.features[r.new_to_old]
    seeds_old = g.splits["train"][:64]
    for seed in (0, 1, 2):
        a = NeighborSampler(graph, [10, 5, -1], backend=backend).sample(seeds_old, seed=seed)
        b = NeighborSampler(r.graph, [10, 5, -1], backend=backend).sample(r.old_to_new[seeds_old], seed=seed)
        assert torch.equal(b.node_ids, r.old_to_new[a.node_ids])
        assert torch.equal(b.indptr, a.indptr) and torch.equal(b.indices, a.indices)
        out_a = mean_aggregate(a, g.features)
        out_b = mean_aggregate(b, features_new)
        assert out_a.shape == (64, 4)
        assert torch.equal(out_a, out_b)
