"""Fixtures for the trainer-runtime tests: one intra-op thread, and the mini-batch sources."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Train with one intra-op thread: steadier timings on a shared 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_mlp_on_features(dataset, epochs: int = 200) -> float:
    """Test accuracy of an MLP on the node features alone (no graph): the bar a GNN must beat."""
    torch.manual_seed(0)
    x, y = dataset.features, dataset.labels
    train, test = dataset.split("train"), dataset.split("test")
    classes = dataset.manifest.num_classes
    mlp = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))
    opt = torch.optim.Adam(mlp.parameters(), lr=0.01)
    for _ in range(epochs):
        loss = torch.nn.functional.cross_entropy(mlp(x[train]), y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float((mlp(x[test]).argmax(1) == y[test]).float().mean())
