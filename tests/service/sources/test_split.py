"""`ensure_split`: seeded random split among labelled nodes, kept source splits, checked fractions."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import GraphData
from graphtier.service.sources.split import ensure_split


def _graph(labels: torch.Tensor | None, n: int = 100) -> GraphData:
    src = torch.arange(n)
    return GraphData(num_nodes=n, src=src, dst=(src + 1) % n, labels=labels, origin="test-graph")


def test_random_split_among_labelled_nodes_is_seeded():
    labels = torch.arange(100) % 4
    labels[::2] = -1  # 50 labelled nodes (the odd ids)
    g = ensure_split(_graph(labels), train_fraction=0.4, val_fraction=0.2, test_fraction=0.2, seed=3)
    sizes = {k: v.numel() for k, v in g.splits.items()}
    assert sizes == {"train": 20, "val": 10, "test": 10}
    every = torch.cat(list(g.splits.values()))
    assert every.unique().numel() == 40 and bool((every % 2 == 1).all())
    assert g.description["split"]["seed"] == 3 and g.description["split"]["among"] == "labelled nodes"
    again = ensure_split(_graph(labels), train_fraction=0.4, val_fraction=0.2, test_fraction=0.2, seed=3)
    assert torch.equal(again.splits["train"], g.splits["train"])
    other = ensure_split(_graph(labels), train_fraction=0.4, val_fraction=0.2, test_fraction=0.2, seed=4)
    assert not torch.equal(other.splits["train"], g.splits["train"])


def test_unlabelled_graph_splits_all_nodes():
    g = ensure_split(_graph(None), train_fraction=0.5, val_fraction=0.0, test_fraction=0.5)
    assert g.splits["train"].numel() == 50 and g.splits["val"].numel() == 0
    assert torch.cat([g.splits["train"], g.splits["test"]]).sort().values.tolist() == list(range(100))


def test_existing_train_split_is_kept():
    g = _graph(None)
    g.splits = {"train": torch.tensor([1, 2, 3])}
    assert ensure_split(g) is g


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        ({"train_fraction": 1.5}, "train_fraction must be a number in [0, 1], got 1.5"),
        ({"val_fraction": -0.1}, "val_fraction must be a number in [0, 1]"),
        ({"train_fraction": 0.6, "val_fraction": 0.3, "test_fraction": 0.2}, "split fractions add up to 1.1 > 1"),
        ({"train_fraction": 0.001}, "train_fraction 0.001 of 100 candidate nodes gives an empty train split"),
    ],
)
def test_bad_fractions(kwargs, problem):
    with pytest.raises(DatasetSourceError) as info:
        ensure_split(_graph(None), **kwargs)
    assert "test-graph" in str(info.value) and problem in str(info.value)


def test_no_labelled_node():
    with pytest.raises(DatasetSourceError, match="no node has a label"):
        ensure_split(_graph(torch.full((100,), -1)))
