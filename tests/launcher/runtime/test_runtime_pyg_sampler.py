"""PyG's NodeLoader on graphtier's sampler: PyG's batch conventions, and a PyG GraphSAGE on Cora
reaching the literature's ~80% without pyg-lib or torch-sparse (torch_geometric is in the test extra)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torch_geometric", reason="torch_geometric is in the test extra: pip install -e '.[test]'")

from torch_geometric.data import Data
from torch_geometric.io import read_planetoid_data
from torch_geometric.nn import GraphSAGE

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.pyg_sampler import (
    GraphtierNeighborLoader,
    GraphtierSampler,
    csc_from_edge_index,
)
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset


def test_batches_follow_neighborloader_conventions(small_rmat):
    graph = small_rmat.graph
    torch.manual_seed(0)
    loader = GraphtierNeighborLoader(small_rmat, [4, 3], input_nodes=small_rmat.split("train"), batch_size=50)
    batch = next(iter(loader))
    seeds = small_rmat.split("train")[:50]
    assert (
        batch.batch_size == 50 and torch.equal(batch.n_id[:50], seeds) and torch.equal(batch.input_id, torch.arange(50))
    )
    assert batch.num_sampled_nodes[0] == 50 and sum(batch.num_sampled_nodes) == batch.num_nodes
    assert sum(batch.num_sampled_edges) == batch.edge_index.shape[1] and len(batch.num_sampled_edges) == 2
    torch.testing.assert_close(batch.x, small_rmat.features[batch.n_id])
    assert torch.equal(batch.y, small_rmat.labels[batch.n_id])
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    for s, d in zip(
        src.tolist()[:200], dst.tolist()[:200], strict=True
    ):  # every sampled edge is an in-edge of the graph
        assert s in graph.row[graph.colptr[d] : graph.colptr[d + 1]].tolist()
    degree = torch.bincount(batch.edge_index[1][: batch.num_sampled_edges[0]], minlength=50)
    assert int(degree.max()) <= 4  # hop 1: at most the fanout per seed
    assert loader.data[0].traffic.total_rows == batch.num_nodes  # features came through the tiered gather


def test_csc_from_edge_index_and_refusals():
    edge_index = torch.tensor([[0, 2, 1, 0], [1, 1, 2, 2]])
    csc = csc_from_edge_index(edge_index, 3)
    assert csc.colptr.tolist() == [0, 0, 2, 4] and csc.row.tolist() == [0, 2, 1, 0]
    with pytest.raises(GraphtierError, match=r"outside \[0, num_nodes=2\)"):
        csc_from_edge_index(edge_index, 2)
    sampler = GraphtierSampler(csc, [2])
    with pytest.raises(GraphtierError, match=r"per edge type \(\[\('a', 'to', 'b'\)\]\) needs a heterogeneous dataset"):
        GraphtierSampler(csc, {("a", "to", "b"): [2]})
    with pytest.raises(GraphtierError, match="starts from nodes only"):
        sampler.sample_from_edges(None)
    with pytest.raises(GraphtierError, match="cannot sample from a list"):
        GraphtierNeighborLoader([1, 2], [2])


def _train_and_test(train, val, test, in_dim: int, classes: int, epochs: int = 30) -> float:
    """PyG GraphSAGE 2x256, Adam 0.003 / 5e-4: test accuracy at the best validation accuracy."""
    model = GraphSAGE(in_dim, 256, num_layers=2, out_channels=classes, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003, weight_decay=5e-4)

    @torch.no_grad()
    def accuracy(loader) -> float:
        model.eval()
        correct = total = 0
        for batch in loader:
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            correct += int((out.argmax(1) == batch.y[: batch.batch_size]).sum())
            total += batch.batch_size
        model.train()
        return correct / total

    best_val, best_test = -1.0, 0.0
    for epoch in range(epochs):
        for batch in train:
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = F.cross_entropy(out, batch.y[: batch.batch_size])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 5 == 4 and (v := accuracy(val)) > best_val:
            best_val, best_test = v, accuracy(test)
    return best_test


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_pyg_graphsage_on_cora_from_a_pyg_data(shared_datasets):
    data: Data = read_planetoid_data(str(shared_datasets / "planetoid_cora"), "cora")  # PyG's own reader, no download
    torch.manual_seed(0)
    loaders = [
        GraphtierNeighborLoader(data, [25, 10], input_nodes=data[f"{split}_mask"], batch_size=size, shuffle=shuffle)
        for split, size, shuffle in (("train", 64, True), ("val", 500, False), ("test", 500, False))
    ]
    test = _train_and_test(*loaders, data.num_features, int(data.y.max()) + 1)
    print(f"PyG GraphSAGE on Cora (PyG Data, graphtier sampler): test {test:.3f}")
    assert test >= 0.78


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_pyg_graphsage_on_cora_from_graphtier_stores(shared_datasets, prepared_root):
    if not (prepared_root / "cora").exists():
        prepare_dataset(
            PrepareConfig(
                source=f"planetoid:{shared_datasets / 'planetoid_cora'}",
                name="cora",
                undirected=True,
                root=prepared_root,
            )
        )
    cora = PreparedDataset.open("cora", prepared_root)
    torch.manual_seed(1)
    loaders = [
        GraphtierNeighborLoader(cora, [25, 10], input_nodes=cora.split(split), batch_size=size, shuffle=shuffle)
        for split, size, shuffle in (("train", 64, True), ("val", 500, False), ("test", 500, False))
    ]
    test = _train_and_test(*loaders, cora.features.shape[1], cora.manifest.num_classes)
    print(f"PyG GraphSAGE on Cora (graphtier stores and sampler): test {test:.3f}")
    assert test >= 0.78


def test_a_feature_and_graph_store_pair_is_sampled_too(small_rmat):
    from graphtier.launcher.runtime.pyg_stores import GraphtierFeatureStore, GraphtierGraphStore

    stores = (GraphtierFeatureStore(small_rmat), GraphtierGraphStore(small_rmat))
    batch = next(iter(GraphtierNeighborLoader(stores, [5, 3], input_nodes=small_rmat.split("train"), batch_size=64)))
    assert batch.batch_size == 64 and torch.equal(batch.n_id[:64], small_rmat.split("train")[:64])
    torch.testing.assert_close(batch.x, small_rmat.features[batch.n_id])
