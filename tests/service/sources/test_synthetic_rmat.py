"""The embedded synthetic dataset: power-law structure and labels that reward neighbour aggregation."""

import pytest
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph import build_csc
from graphtier.service.sources.synthetic import generate_rmat


def _linear_probe_accuracy(x, y, train, test, classes, steps=150):
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[train]), y[train]).backward()
        opt.step()
    return float((model(x[test]).argmax(1) == y[test]).float().mean())


def test_neighbour_aggregation_beats_features_alone():
    g = generate_rmat(scale=13, feature_dim=64)
    graph = build_csc(g.num_nodes, g.src, g.dst, undirected=True)
    degree = graph.in_degree().clamp(min=1).unsqueeze(1).float()
    mean_neighbours = torch.zeros_like(g.features).index_add_(0, graph.dst_of_edges(), g.features[graph.row]) / degree
    train, test = g.splits["train"], g.splits["test"]
    alone = _linear_probe_accuracy(g.features, g.labels, train, test, 8)
    with_neighbours = _linear_probe_accuracy(torch.cat([g.features, mean_neighbours], 1), g.labels, train, test, 8)
    assert alone > 0.2  # features carry signal (chance is 1/8)...
    assert with_neighbours > alone + 0.08  # ...and the graph carries clearly more


def test_degree_distribution_is_heavy_tailed_and_deterministic():
    a, b = generate_rmat(scale=12), generate_rmat(scale=12)
    assert torch.equal(a.src, b.src) and torch.equal(a.features, b.features)
    assert not torch.equal(a.src, generate_rmat(scale=12, seed=1).src)
    degree = torch.bincount(a.src, minlength=a.num_nodes).float()
    assert degree.max() > 20 * degree.mean()  # R-MAT skew
    top = degree.sort(descending=True).values
    assert top[: a.num_nodes // 10].sum() > 0.4 * degree.sum()
    sizes = {k: v.numel() for k, v in a.splits.items()}
    assert sizes == {"train": 410, "val": 205, "test": 410}
    assert int(a.labels.min()) == 0 and int(a.labels.max()) == 7


@pytest.mark.parametrize(
    "options, message",
    [
        ({"scale": 0}, "scale must be in"),
        ({"scale": 8, "num_classes": 1}, "num_classes"),
        ({"homophily": 1.5}, "homophily"),
        ({"train_fraction": 0.8, "val_fraction": 0.3}, "add up to"),
        ({"edge_factor": 0}, "edge_factor"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(DatasetSourceError, match=message):
        generate_rmat(**options)
