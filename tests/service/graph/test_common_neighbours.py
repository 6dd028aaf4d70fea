"""Common-neighbour pair features: CN, Adamic-Adar and resource allocation of node pairs over a CSC."""

import math

import pytest
import torch

from graphtier.service.graph import build_csc
from graphtier.service.graph.common_neighbours import PairStructure


def _graph():
    """0-1, 0-2, 1-2, 1-3, 2-3, 3-4 (undirected) and a self loop on 0."""
    src = torch.tensor([0, 0, 1, 1, 2, 3, 0])
    dst = torch.tensor([1, 2, 2, 3, 3, 4, 0])
    return build_csc(5, src, dst, undirected=True)


def test_features_are_the_heuristics_of_each_pair_log1p_scaled():
    structure = PairStructure(_graph())
    features = structure.features(torch.tensor([[0, 3], [3, 0], [1, 2], [0, 4], [2, 4]])).expm1()
    # degrees (self loop included): 0 -> 3, 1 -> 3, 2 -> 3, 3 -> 3, 4 -> 1
    aa, ra = 1 / math.log(3), 1 / 3
    expected = [
        [2, 2 * aa, 2 * ra],  # 0 and 3 share 1 and 2
        [2, 2 * aa, 2 * ra],  # the same pair either way round
        [2, 2 * aa, 2 * ra],  # 1 and 2 share 0 and 3; each other and 0's self loop do not count
        [0, 0, 0],
        [1, aa, ra],  # 2 and 4 share 3
    ]
    assert torch.allclose(features, torch.tensor(expected), atol=1e-5)


def test_chunked_expansion_matches_one_pass(monkeypatch):
    torch.manual_seed(0)
    graph = build_csc(200, torch.randint(200, (1500,)), torch.randint(200, (1500,)), undirected=True)
    pairs = torch.randint(200, (3000, 2))
    whole = PairStructure(graph).features(pairs)
    monkeypatch.setattr("graphtier.service.graph.common_neighbours._CHUNK_EXPANSIONS", 64)
    assert torch.equal(PairStructure(graph).features(pairs), whole)
    assert (whole[:, 0] > 0).any()


@pytest.mark.parametrize(
    ("pairs", "match"),
    [(torch.tensor([0, 1]), r"\[P, 2\] node ids, got shape \(2,\)"), (torch.tensor([[0, 5]]), r"outside 0\.\.4")],
)
def test_bad_pairs_are_refused(pairs, match):
    with pytest.raises(ValueError, match=match):
        PairStructure(_graph()).features(pairs)
