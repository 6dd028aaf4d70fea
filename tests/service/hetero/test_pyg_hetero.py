"""PyG's stock NeighborLoader over graphtier's heterogeneous stores and heterogeneous sampler: HeteroData batches
checked against ACM's source files, and PyG's to_hetero(GraphSAGE) learning ACM from them."""

from __future__ import annotations

import dataclasses
import gzip

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

pytest.importorskip("torch_geometric", reason="torch_geometric is in the test extra: pip install -e '.[test]'")

from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv, to_hetero

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches
from graphtier.pyg import (
    GraphtierNeighborLoader,
    GraphtierSampler,
    hetero_input_nodes,
    hetero_stores,
    source_ids,
    to_hetero_data,
)

WRITTEN_BY, REV_WRITTEN_BY = ("paper", "written_by", "author"), ("author", "rev_written_by", "paper")
REV_HAS_SUBJECT = ("subject", "rev_has_subject", "paper")


def _source_pairs(shared_datasets, relation: str) -> set[tuple[int, int]]:
    """(head, tail) pairs of one relation as ACM's source file lists them."""
    path = shared_datasets / "ogb_hetero_acm" / "raw" / "relations" / relation / "edge.csv.gz"
    pairs = np.loadtxt(gzip.open(path), delimiter=",", dtype=np.int64, ndmin=2)
    return set(map(tuple, pairs.tolist()))


def test_stock_loader_yields_hetero_batches_of_the_graph(prepared_acm, shared_datasets):
    acm, schema = prepared_acm, prepared_acm.manifest.hetero
    fanouts = {REV_WRITTEN_BY: [4, 0], REV_HAS_SUBJECT: [2, 0], WRITTEN_BY: [0, 3]}
    torch.manual_seed(0)
    data = hetero_stores(acm)
    loader = NeighborLoader(
        data,
        num_neighbors=fanouts,
        input_nodes=hetero_input_nodes(acm, "train"),
        neighbor_sampler=GraphtierSampler(acm, fanouts),
        batch_size=40,
    )
    batch = next(iter(loader))
    paper = schema.type_named("paper")
    seeds = acm.split("train")[:40] - paper.offset
    assert batch["paper"].batch_size == 40 and torch.equal(batch["paper"].n_id[:40], seeds)
    assert batch["paper"].num_sampled_nodes[0] == 40 and batch["author"].num_sampled_nodes[0] == 0
    features = acm.array("features.paper")
    torch.testing.assert_close(batch["paper"].x, features[batch["paper"].n_id])
    assert torch.equal(batch["paper"].y, acm.labels[batch["paper"].n_id + paper.offset])
    assert data[0].traffic["paper"].total_rows == batch["paper"].num_nodes  # read through the tiered gather
    # every sampled edge is an edge of the source graph, of its own relation (source ids, read from the files)
    written = _source_pairs(shared_datasets, "paper___written_by___author")
    for key, flip in ((WRITTEN_BY, False), (REV_WRITTEN_BY, True)):
        head, _, tail = key
        src, dst = batch[key].edge_index
        heads = source_ids(acm, head, batch[head].n_id[src]).tolist()
        tails = source_ids(acm, tail, batch[tail].n_id[dst]).tolist()
        assert heads and all(((t, h) if flip else (h, t)) in written for h, t in zip(heads, tails, strict=True))
    subjects = _source_pairs(shared_datasets, "paper___has_subject___subject")
    src, dst = batch[REV_HAS_SUBJECT].edge_index
    pairs = zip(
        source_ids(acm, "paper", batch["paper"].n_id[dst]).tolist(),
        source_ids(acm, "subject", batch["subject"].n_id[src]).tolist(),
        strict=True,
    )
    assert all(pair in subjects for pair in pairs)
    # hop 1 expands the seeds (at most the fanout per relation), hop 2 only what num_neighbors names
    hop1 = batch[REV_WRITTEN_BY].edge_index[1][: batch[REV_WRITTEN_BY].num_sampled_edges[0]]
    assert int(torch.bincount(hop1).max()) <= 4 and int(hop1.max()) < 40
    assert batch[REV_WRITTEN_BY].num_sampled_edges[1] == 0 and batch[WRITTEN_BY].num_sampled_edges[0] == 0
    assert batch[WRITTEN_BY].num_sampled_edges[1] > 0
    assert batch[("paper", "has_subject", "subject")].edge_index.shape == (2, 0)

    # graphtier's own heterogeneous batch as the same kind of HeteroData
    hetero = next(HeteroLocalBatches(acm, ["4", "3"], batch_size=16).epoch(0))
    own = to_hetero_data(hetero.subgraph, schema, hetero.x, hetero.y)
    assert own["paper"].batch_size == hetero.subgraph.num_seeds and torch.equal(own["paper"].y, hetero.y)
    torch.testing.assert_close(own["paper"].x, features[own["paper"].n_id])
    assert sum(own[key].edge_index.shape[1] for key in own.edge_types) == hetero.subgraph.indices.numel()
    with pytest.raises(GraphtierError, match="got 3 labels for 16 seeds of 1 type"):  # not a short y
        to_hetero_data(hetero.subgraph, schema, hetero.x, hetero.y[:3])
    with pytest.raises(GraphtierError, match=r"features name node types \['venue'\]"):  # not silently dropped
        to_hetero_data(hetero.subgraph, schema, {"venue": hetero.x["paper"]})
    one_type = dataclasses.replace(hetero.subgraph, edge_types=None, node_types=None)  # a sample of one node type
    with pytest.raises(GraphtierError, match="one node type: it has no node types"):  # not an AttributeError
        to_hetero_data(one_type, schema)


def test_refuses_what_the_hetero_sampler_cannot_do(prepared_acm):
    with pytest.raises(GraphtierError, match="edge types .*'cites'.* the dataset does not have"):
        GraphtierSampler(prepared_acm, {("paper", "cites", "paper"): [5]})
    with pytest.raises(GraphtierError, match="same number"):
        GraphtierSampler(prepared_acm, {REV_WRITTEN_BY: [5, 5], REV_HAS_SUBJECT: [5]})
    loader = GraphtierNeighborLoader(prepared_acm, [2], input_nodes=("venue", torch.arange(3)))
    with pytest.raises(GraphtierError, match=r"one of \['author', 'paper', 'subject'\]; got type 'venue'"):
        next(iter(loader))
    with pytest.raises(GraphtierError, match=r"needs input_nodes=\(node type, ids\)"):  # not a bare AssertionError
        GraphtierNeighborLoader(prepared_acm, [2])
    with pytest.raises(GraphtierError, match="integer ids .* torch.float32"):  # not truncated to 0 and 1
        next(iter(GraphtierNeighborLoader(prepared_acm, [2], input_nodes=("paper", torch.tensor([0.5, 1.7])))))
    twice = GraphtierNeighborLoader(prepared_acm, [2], input_nodes=("paper", torch.tensor([3, 3])), batch_size=2)
    with pytest.raises(GraphtierError, match="input node 3 of type 'paper' appears more than once"):  # its own id
        next(iter(twice))


class _SAGE(nn.Module):
    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv((-1, -1), hidden), SAGEConv((-1, -1), classes)
        self.dropout = nn.Dropout(0.7)

    def forward(self, x, edge_index):
        return self.conv2(self.dropout(F.relu(self.conv1(self.dropout(x), edge_index))), edge_index)


def test_pyg_to_hetero_sage_learns_acm_from_the_stock_loader(prepared_acm):
    """PyG's own model on PyG's own loader, graphtier underneath: well above chance (1/3) in a short run
    (an MLP of the paper features reaches ~0.77 with all epochs)."""
    acm, schema = prepared_acm, prepared_acm.manifest.hetero
    torch.manual_seed(0)
    data = hetero_stores(acm)

    def loader(split: str, batch_size: int) -> NeighborLoader:
        return NeighborLoader(
            data,
            num_neighbors=[10, 5],
            input_nodes=hetero_input_nodes(acm, split),
            neighbor_sampler=GraphtierSampler(acm, [10, 5]),
            batch_size=batch_size,
            shuffle=split == "train",
        )

    metadata = ([t.name for t in schema.node_types], [(r.head, r.name, r.tail) for r in schema.relations])
    model = to_hetero(_SAGE(64, acm.manifest.num_classes), metadata, aggr="mean")

    def inputs(batch):  # featureless types (authors, subjects) enter as zeros: their papers inform them
        return {t: batch[t].x if "x" in batch[t] else torch.zeros(batch[t].num_nodes, 1) for t in batch.node_types}

    train = loader("train", 20)
    first = next(iter(train))
    with torch.no_grad():
        model(inputs(first), first.edge_index_dict)  # materialise the lazy input widths
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    for _ in range(30):
        for batch in train:
            seeds = batch["paper"].batch_size
            out = model(inputs(batch), batch.edge_index_dict)["paper"][:seeds]
            loss = F.cross_entropy(out, batch["paper"].y[:seeds])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in loader("test", 500):
            seeds = batch["paper"].batch_size
            out = model(inputs(batch), batch.edge_index_dict)["paper"][:seeds]
            correct += int((out.argmax(1) == batch["paper"].y[:seeds]).sum())
            total += seeds
    assert total == 1000 and correct / total >= 0.6, correct / total
