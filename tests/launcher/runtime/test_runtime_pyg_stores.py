"""PyG's (FeatureStore, GraphStore) over graphtier data: the tensors, the CSC and PyG's own
remote-backend assembly read graphtier's tiers; PyG's stock NeighborLoader and NodeLoader run on
them through graphtier's sampler, with neither pyg-lib nor torch-sparse."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric", reason="torch_geometric is not installed (the PyG baseline installs it)")

from torch_geometric.data import EdgeAttr, TensorAttr
from torch_geometric.loader.utils import filter_custom_store

from graphtier.contract.errors import GraphtierError
from graphtier.pyg import GraphtierFeatureStore, GraphtierGraphStore, GraphtierSampler, stores


def test_feature_store_serves_features_and_labels_through_the_tiered_gather(small_rmat):
    store = GraphtierFeatureStore(small_rmat)
    ids = torch.tensor([5, 0, 4095, 5])
    torch.testing.assert_close(store.get_tensor(None, "x", ids), small_rmat.features[ids])
    assert torch.equal(store.get_tensor(None, "y", ids), small_rmat.labels[ids])
    assert torch.equal(store.get_tensor(None, "y", slice(0, 3)), small_rmat.labels[:3])
    assert store.get_tensor(None, "x", None).shape == tuple(small_rmat.features.shape)
    assert store.traffic.total_rows == 4 + small_rmat.features.shape[0]
    assert store.get_tensor_size(None, "x") == (4096, 16) and store.get_tensor_size(None, "y") == (4096,)
    assert [a.attr_name for a in store.get_all_tensor_attrs()] == ["x", "y"]
    with pytest.raises(KeyError, match="no tensor 'edge_attr'"):
        store.get_tensor(None, "edge_attr", ids)
    with pytest.raises(GraphtierError, match=r"outside \[0, 4096\)"):
        store.get_tensor(None, "x", torch.tensor([4096]))
    with pytest.raises(GraphtierError, match="read-only"):
        store.put_tensor(torch.zeros(2, 16), TensorAttr(None, "x", torch.tensor([0, 1])))


def test_feature_buffers_are_reused_only_once_released(small_rmat):
    store, features = GraphtierFeatureStore(small_rmat), small_rmat.features
    ids = [torch.randint(0, 4096, (1000,), generator=torch.Generator().manual_seed(s)) for s in range(4)]
    first = store.get_tensor(None, "x", ids[0])
    address = first.data_ptr()
    assert address % 64 == 0  # rows on cache lines, for the gather's streaming stores
    view = first[:10]
    del first
    held = store.get_tensor(None, "x", ids[1])  # the first buffer is still viewed: a new one
    assert held.data_ptr() != address
    del view
    reused = store.get_tensor(None, "x", ids[2])
    assert reused.data_ptr() == address
    as_numpy = reused.numpy()
    del reused
    other = store.get_tensor(None, "x", ids[3])  # numpy's view keeps its buffer too
    assert other.data_ptr() not in (address, held.data_ptr())
    for x, i in [(held, ids[1]), (as_numpy, ids[2]), (other, ids[3])]:
        assert torch.equal(torch.as_tensor(x), features[i])


def test_graph_store_exposes_the_csc_without_copying(small_rmat):
    store = GraphtierGraphStore(small_rmat)
    (attr,) = store.get_all_edge_attrs()
    assert attr.layout.value == "csc" and attr.size == (4096, 4096) and attr.edge_type is None
    row, colptr, perm = store.csc()
    assert perm is None and torch.equal(colptr, small_rmat.graph.colptr) and torch.equal(row, small_rmat.graph.row)
    row, col = store.get_edge_index(EdgeAttr(None, "coo"))
    assert torch.equal(torch.bincount(col, minlength=4096), colptr[1:] - colptr[:-1])
    with pytest.raises(KeyError):
        store.get_edge_index(EdgeAttr(None, "csr"))


def test_pyg_remote_backend_assembly_reads_graphtier(small_rmat):
    fs, gs = GraphtierFeatureStore(small_rmat), GraphtierGraphStore(small_rmat)
    node = torch.tensor([10, 20, 30])
    data = filter_custom_store(fs, gs, node, torch.tensor([1, 2]), torch.tensor([0, 0]), None)
    torch.testing.assert_close(data.x, small_rmat.features[node])
    assert torch.equal(data.y, small_rmat.labels[node]) and data.num_nodes == 3


def test_pygs_stock_loaders_run_on_graphtier_stores_through_its_sampler(small_rmat):
    from torch_geometric.loader import NeighborLoader, NodeLoader

    train = small_rmat.split("train")
    torch.manual_seed(0)
    loader = NeighborLoader(
        stores(small_rmat),
        num_neighbors=[5, 3],
        input_nodes=train,
        batch_size=64,
        neighbor_sampler=GraphtierSampler(small_rmat, [5, 3]),
    )
    batch = next(iter(loader))
    assert batch.batch_size == 64 and batch.x.shape[1] == 16 and torch.equal(batch.n_id[:64], train[:64])
    torch.testing.assert_close(batch.x, small_rmat.features[batch.n_id])
    assert torch.equal(batch.y[:64], small_rmat.labels[batch.n_id[:64]])
    assert batch.num_sampled_nodes[0] == 64 and len(batch.num_sampled_nodes) == 3
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]  # every edge is the graph's
    graph = small_rmat.graph
    assert all(
        int(s) in graph.row[graph.colptr[d] : graph.colptr[d + 1]].tolist()
        for s, d in zip(src[:50], dst[:50], strict=True)
    )
    pair = stores(small_rmat)
    node_loader = NodeLoader(pair, node_sampler=GraphtierSampler(pair, [4]), input_nodes=train[:10], batch_size=10)
    (only,) = list(node_loader)
    assert torch.equal(only.n_id[:10], train[:10]) and only.x.shape == (only.n_id.numel(), 16)
