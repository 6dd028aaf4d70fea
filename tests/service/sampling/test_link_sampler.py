"""Link-prediction batches: seed edges, seeded negatives, one native sample around all endpoints."""

import pytest
import torch

from graphtier.contract.errors import SamplingError
from graphtier.service.sampling import NeighborSampler
from graphtier.service.sampling.link import LinkSampler, drop_target_edges, max_link_pairs, max_link_seeds


@pytest.fixture(scope="module")
def train_pairs(cora_link):
    return cora_link.array("link_train")


@pytest.mark.parametrize("negative_sampling", ["uniform", "corrupt-tail"])
def test_pairs_name_the_edges_and_negatives_over_the_seeds(cora_link, train_pairs, negative_sampling):
    graph = cora_link.graph
    sampler = LinkSampler(
        NeighborSampler(graph, [5, 5]), train_pairs, graph.num_nodes, negatives=3, negative_sampling=negative_sampling
    )
    edge_ids = torch.tensor([0, 7, 99, 4000, 12])
    sub = sampler.sample(edge_ids, seed=11)
    assert sub.num_positive == 5 and sub.num_pairs == max_link_pairs(5, 3)
    assert sub.num_seeds <= max_link_seeds(5, 3, negative_sampling)
    global_pairs = sub.node_ids[sub.pairs]  # local ids -> global ids
    assert torch.equal(global_pairs[:5], train_pairs[edge_ids])
    assert bool((sub.pairs < sub.num_seeds).all())  # every endpoint is a seed: embedded by the last layer
    seeds = sub.node_ids[: sub.num_seeds]
    assert seeds.unique().numel() == seeds.numel() == global_pairs.unique().numel()
    negatives = global_pairs[5:]
    if negative_sampling == "corrupt-tail":
        assert torch.equal(negatives[:, 0], train_pairs[edge_ids, 0].repeat_interleave(3))
    again = sampler.sample(edge_ids, seed=11)
    assert torch.equal(again.node_ids, sub.node_ids) and torch.equal(again.pairs, sub.pairs)
    other = sampler.sample(edge_ids, seed=12)
    assert not torch.equal(other.node_ids[other.pairs][5:], negatives)
    assert len(sub.blocks()) == 2 and sub.blocks()[-1].num_dst == sub.num_seeds


def test_bad_train_pairs_are_refused(cora_link):
    with pytest.raises(SamplingError, match=r"\[n, 2\]"):
        LinkSampler(NeighborSampler(cora_link.graph, [5]), torch.zeros(4, 3, dtype=torch.int64), 10, negatives=1,
                    negative_sampling="uniform")  # fmt: skip


def test_drop_target_edges_takes_out_each_positive_edge_and_nothing_else(cora_link, train_pairs):
    graph = cora_link.graph
    sampler = LinkSampler(NeighborSampler(graph, [-1, -1]), train_pairs, graph.num_nodes, negatives=1,
                          negative_sampling="uniform")  # fmt: skip
    sub = sampler.sample(torch.arange(0, 400, 8), seed=3)
    blocks = sub.blocks()
    kept = drop_target_edges(blocks, sub.pairs, sub.num_positive)

    def edges(block):  # global (src, dst) of every edge of a block
        src, dst = block.edge_index()
        return set(zip(sub.node_ids[src].tolist(), sub.node_ids[dst].tolist(), strict=True))

    targets = {tuple(p) for p in train_pairs[torch.arange(0, 400, 8)].tolist()}
    targets |= {(v, u) for u, v in targets}
    for before, after in zip(blocks, kept, strict=True):
        assert (after.num_src, after.num_dst) == (before.num_src, before.num_dst)
        assert edges(after) == edges(before) - targets
    assert edges(blocks[-1]) & targets  # all neighbours sampled: every positive edge was there to take out
