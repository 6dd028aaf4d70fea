"""Hotness scores against literal transcriptions of the paper's definitions on small graphs."""

import numpy as np
import pytest
import torch

from graphtier.contract.errors import DatasetSourceError, GraphtierError
from graphtier.service.graph import build_csc
from graphtier.service.hotness import ScoreSpec, compute_scores


@pytest.fixture
def small_graph():
    gen = torch.Generator().manual_seed(3)
    n = 40
    src = torch.randint(0, n, (200,), generator=gen)
    dst = torch.randint(0, n, (200,), generator=gen)
    return n, build_csc(n, src, dst)


def algorithm1_reference(n, edges, iterations, damping, train_ids):
    """Algorithm 1 of Min et al. (KDD'22), line by line, with Python loops."""
    in_degree = [0] * n
    for _, v in edges:
        in_degree[v] += 1
    score = [1.0 / n] * n
    if train_ids is not None:
        weight = n / len(train_ids)
        for t in train_ids:
            score[t] *= weight
    for _ in range(iterations):
        score = [s / in_degree[j] if in_degree[j] else 0.0 for j, s in enumerate(score)]
        pulled = [0.0] * n
        for u, v in edges:  # pull_from_neighbor: u collects from the nodes it points to
            pulled[u] += score[v]
        score = [(1 - damping) / n + damping * p for p in pulled]
    return np.array(score)


def edges_of(graph):
    return list(zip(graph.row.tolist(), graph.dst_of_edges().tolist(), strict=True))


def test_degree_is_out_degree(small_graph):
    n, graph = small_graph
    expected = np.zeros(n)
    for u, _ in edges_of(graph):
        expected[u] += 1
    np.testing.assert_array_equal(compute_scores(graph, ScoreSpec(kind="degree")).numpy(), expected)


def test_reverse_pagerank_matches_reference(small_graph):
    n, graph = small_graph
    got = compute_scores(graph, ScoreSpec(kind="rpr", iterations=7, damping=0.8))
    np.testing.assert_allclose(got.numpy(), algorithm1_reference(n, edges_of(graph), 7, 0.8, None), rtol=1e-12)


def test_weighted_reverse_pagerank_matches_algorithm_1(small_graph):
    n, graph = small_graph
    train = torch.tensor([1, 5, 7, 30])
    got = compute_scores(graph, ScoreSpec(kind="wrpr"), train_ids=train)
    expected = algorithm1_reference(n, edges_of(graph), 5, 0.85, train.tolist())
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    assert ScoreSpec(kind="wrpr").effective_iterations == 5  # the paper's default


def test_wrpr_favours_the_neighbourhood_of_training_nodes():
    # Two identical chains 0->1->...->7 and 8->9->...->15; only node 7 is a training node.
    src = torch.tensor([i for i in range(15) if i != 7])
    graph = build_csc(16, src, src + 1)
    wrpr = compute_scores(graph, ScoreSpec(kind="wrpr"), train_ids=torch.tensor([7]))
    rpr = compute_scores(graph, ScoreSpec(kind="rpr", iterations=5))
    # Five power iterations move the training node's extra mass five hops upstream.
    assert wrpr[7 - 5] > 2 * wrpr[15 - 5]
    assert rpr[7 - 5] == rpr[15 - 5]


def test_wrpr_without_train_ids_is_an_error(small_graph):
    _, graph = small_graph
    with pytest.raises(GraphtierError, match="training ids"):
        compute_scores(graph, ScoreSpec(kind="wrpr"), train_ids=torch.empty(0, dtype=torch.int64))


def test_user_scores(tmp_path, small_graph):
    n, graph = small_graph
    path = tmp_path / "s.npy"
    np.save(path, np.arange(n, dtype=np.float32))
    got = compute_scores(graph, ScoreSpec(kind="user", path=str(path)))
    np.testing.assert_array_equal(got.numpy(), np.arange(n))

    np.save(path, np.arange(n - 1, dtype=np.float32))
    with pytest.raises(DatasetSourceError, match=rf"s\.npy.*shape \({n - 1},\), expected \({n},\)"):
        compute_scores(graph, ScoreSpec(kind="user", path=str(path)))
    bad = np.zeros(n)
    bad[3] = np.nan
    np.save(path, bad)
    with pytest.raises(DatasetSourceError, match="finite"):
        compute_scores(graph, ScoreSpec(kind="user", path=str(path)))


@pytest.mark.parametrize("text", ["pagerank", "user", ""])
def test_unknown_score_names_the_value(text):
    with pytest.raises(GraphtierError, match="unknown score"):
        ScoreSpec.parse(text)


def test_score_spec_validation():
    assert ScoreSpec.parse("user:/x.npy").path == "/x.npy"
    with pytest.raises(ValueError):
        ScoreSpec(kind="rpr", damping=1.5)
    with pytest.raises(ValueError):
        ScoreSpec(kind="degree", path="/x.npy")


def test_fanout_aware_wrpr_passes_min_one_k_over_d(small_graph):
    n, graph = small_graph
    train = torch.tensor([2, 9, 11])
    k, damping = 3, 0.85
    in_degree = graph.in_degree().double()
    score = torch.full((n,), 1.0 / n, dtype=torch.float64)
    score[train] *= n / 3
    for _ in range(5):
        pulled = torch.zeros(n, dtype=torch.float64)
        for u, v in edges_of(graph):
            pulled[u] += score[v] * min(1.0, k / in_degree[v].item())
        score = damping * pulled / pulled.sum() + (1 - damping) / n
    got = compute_scores(graph, ScoreSpec(kind="wrpr", fanout=k), train_ids=train)
    np.testing.assert_allclose(got.numpy(), score.numpy(), rtol=1e-10)
    assert "fanout=3" in ScoreSpec(kind="wrpr", fanout=k).label()
    with pytest.raises(ValueError):
        ScoreSpec(kind="degree", fanout=3)


@pytest.mark.parametrize(
    "spec", [ScoreSpec(kind="wrpr"), ScoreSpec(kind="rpr", iterations=7), ScoreSpec(kind="wrpr", fanout=4)]
)
def test_symmetric_pull_is_bit_identical_to_the_scatter(tmp_path, spec):
    """An undirected graph's scores pulled per column (gather + per-column sum) are the scatter's
    bits exactly: in memory and over an on-disk CSC read in many column ranges."""
    from graphtier.service.out_of_core.external_sort import DiskCSC
    from graphtier.service.out_of_core.spill import SpillArray

    gen = torch.Generator().manual_seed(11)
    n = 3000  # skewed degrees (long columns next to short ones), and isolated nodes
    src = (torch.rand(40_000, generator=gen) ** 3 * (n - 100)).long()
    dst = torch.randint(0, n - 100, (40_000,), generator=gen)
    graph = build_csc(n, src, dst, undirected=True)
    train = torch.arange(0, n, 7)
    scatter = compute_scores(graph, spec, train_ids=train)
    pulled = compute_scores(graph, spec, train_ids=train, symmetric=True)
    assert torch.equal(scatter, pulled)

    row = SpillArray(tmp_path / "row", np.int64)
    row.append(graph.row)
    on_disk = DiskCSC(graph.colptr, row, chunk_edges=5000)
    assert len(list(on_disk.column_chunks())) > 10
    assert torch.equal(compute_scores(on_disk, spec, train_ids=train, symmetric=True), scatter)
    row.delete()
