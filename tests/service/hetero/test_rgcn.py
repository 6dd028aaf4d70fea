"""R-GCN and HGT over heterogeneous local batches: learned embeddings for featureless types, weights per relation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches
from graphtier.launcher.runtime.models.rgcn import RGCN, RGCNConv
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.sampling import Block


@pytest.fixture
def hetero_dataset(hetero_root, tmp_path) -> PreparedDataset:
    prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="heterogeneous", root=tmp_path / "ds"))
    return PreparedDataset(tmp_path / "ds" / "heterogeneous")


def test_conv_uses_each_relations_weight_and_mean():
    conv = RGCNConv(1, 1, num_relations=2)
    with torch.no_grad():
        conv.relation_weight.copy_(torch.tensor([[2.0, 10.0]]))
        conv.root.weight.fill_(0.0)
        conv.root.bias.fill_(0.0)
    # destination 0 has sources 1, 2 by relation 0 and source 3 by relation 1
    block = Block(indptr=torch.tensor([0, 3]), indices=torch.tensor([1, 2, 3]), num_src=4, num_dst=1)
    x = torch.tensor([[0.0], [1.0], [3.0], [5.0]])
    out = conv(block, torch.tensor([0, 0, 1]), x)
    assert out.item() == pytest.approx(2.0 * (1.0 + 3.0) / 2 + 10.0 * 5.0)


def test_batches_carry_rows_of_each_featured_type(hetero_dataset):
    batches = HeteroLocalBatches(hetero_dataset, ["-1", "-1"], batch_size=2)
    schema = hetero_dataset.manifest.hetero
    batch = next(batches.epoch(0))
    ids, types = batch.input_nodes
    for name, rows in batch.x.items():
        info = schema.type_named(name)
        local = ids[types == schema.type_index(name)] - info.offset
        assert torch.equal(rows, hetero_dataset.array(info.feature_array)[local])
    assert set(batch.x) == {"paper", "venue"} and batch.y.numel() == batch.subgraph.num_seeds


def test_rgcn_fits_the_train_labels_and_learns_embeddings(hetero_dataset):
    torch.manual_seed(0)
    schema = hetero_dataset.manifest.hetero
    batches = HeteroLocalBatches(hetero_dataset, ["-1", "-1"], batch_size=8)
    model = RGCN(schema, 16, 2, 2, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    embedding_before = model.input.embed["author"].weight.detach().clone()
    for epoch in range(15):
        for batch in batches.epoch(epoch):
            ids, types = batch.input_nodes
            loss = F.cross_entropy(model(batch.blocks, batch.edge_types, ids, types, batch.x), batch.y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert loss.item() < 0.05
    assert not torch.equal(model.input.embed["author"].weight, embedding_before)


def test_missing_type_rows_are_named(hetero_dataset):
    batch = next(HeteroLocalBatches(hetero_dataset, ["-1"], batch_size=8).epoch(0))
    model = RGCN(hetero_dataset.manifest.hetero, 8, 2, 1)
    ids, types = batch.input_nodes
    with pytest.raises(GraphtierError, match="features of node type 'paper' must be"):
        model(batch.blocks, batch.edge_types, ids, types, {"venue": batch.x["venue"]})


def test_hgt_fits_the_train_labels(hetero_dataset):
    from graphtier.launcher.runtime.models.hgt import HGT

    torch.manual_seed(0)
    batches = HeteroLocalBatches(hetero_dataset, ["-1", "-1"], batch_size=8)
    model = HGT(hetero_dataset.manifest.hetero, 16, 2, 2, heads=2, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(10):
        for batch in batches.epoch(epoch):
            ids, types = batch.input_nodes
            loss = F.cross_entropy(model(batch.blocks, batch.edge_types, ids, types, batch.x), batch.y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert loss.item() < 0.05
    assert model.convs[0].prior.grad is not None and bool(model.convs[0].prior.grad.abs().sum() > 0)


def test_hgt_input_enters_at_unit_scale_and_embeddings_still_learn(hetero_dataset):
    """HGT normalises each featured type's projected rows (LayerNorm, ReLU): row-normalised features
    (~1/dim per column) would otherwise enter at ~1e-2 and its attention would stay uniform. Its
    learned embeddings get a LayerNorm too: after one row-wise Adam step they have moved by ~lr, and
    enter hundreds of times larger (Freebase, every type featureless, stayed under label propagation)."""
    from graphtier.launcher.runtime.embedding_optimizer import EmbeddingOptimizer
    from graphtier.launcher.runtime.models.hgt import HGT

    torch.manual_seed(0)
    schema = hetero_dataset.manifest.hetero
    batch = next(HeteroLocalBatches(hetero_dataset, ["-1", "-1"], batch_size=8).epoch(0))
    ids, types = batch.input_nodes
    tiny = {name: rows / rows.shape[1] / 100 for name, rows in batch.x.items()}  # a thousandth of the scale
    model = HGT(schema, 16, 2, 2, heads=2, dropout=0.0)
    embeddings = EmbeddingOptimizer.for_model(model, lr=1e-3)
    assert embeddings is not None
    h = model.input(ids, types, tiny)
    for name in tiny:
        rows = h[types == schema.type_index(name)]
        assert (rows >= 0).all() and rows.pow(2).mean().item() > 0.2, name  # ReLU(LayerNorm): about half of 1
    F.cross_entropy(model(batch.blocks, batch.edge_types, ids, types, tiny), batch.y).backward()
    assert model.input.embed["author"].weight.grad.abs().sum() > 0  # zero rows: no ReLU stops their gradient
    assert model.convs[0].attention.grad.abs().max() > 1e-6
    assert embeddings.step() > 0
    authors = types == schema.type_index("author")
    moved = model.input.embed["author"].weight
    assert 0 < moved.abs().max().item() < 1e-2  # one step of ~lr
    rows = model.input(ids, types, tiny)[authors]
    raw = moved[ids[authors] - model.input.offsets[schema.type_index("author")]]
    # LayerNorm: rows ~1e-3 enter ~300x larger (not 1000x: its eps 1e-5 is still above their variance ~1e-6)
    assert rows.pow(2).mean().sqrt().item() > 100 * raw.pow(2).mean().sqrt().item()
