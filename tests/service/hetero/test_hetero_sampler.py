"""Heterogeneous sampling: per-relation fanouts, native and torch giving the same sample, blocks per relation."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import SamplingError
from graphtier.service.native_ops import native_available, unavailable_reason
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler

BACKENDS = ["torch", pytest.param("native", marks=pytest.mark.skipif(not native_available(), reason="no native ops"))]


@pytest.fixture
def hetero_dataset(hetero_root, tmp_path) -> PreparedDataset:
    prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="heterogeneous", root=tmp_path / "ds"))
    return PreparedDataset(tmp_path / "ds" / "heterogeneous")


def _sampler(ds: PreparedDataset, fanouts, backend: str) -> HeteroNeighborSampler:
    return HeteroNeighborSampler(ds.graph, ds.array("edge_type"), ds.manifest.hetero, fanouts, backend=backend)


def _relation_neighbours(ds: PreparedDataset, v: int, r: int) -> set[int]:
    colptr, row, etype = ds.graph.colptr, ds.graph.row, ds.array("edge_type")
    lo, hi = int(colptr[v]), int(colptr[v + 1])
    return {int(row[e]) for e in range(lo, hi) if int(etype[e]) == r}


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_relation_gets_its_own_fanout(hetero_dataset, backend):
    ds = hetero_dataset
    schema = ds.manifest.hetero
    keys = [r.key for r in schema.relations]
    fanouts = ["author-rev_written_by-paper:1,paper-rev_cites-paper:-1,venue-rev_published_in-paper:1", "2"]
    sub = _sampler(ds, fanouts, backend).sample(ds.split("train"), seed=7)
    per_hop = schema.relation_fanouts(fanouts)
    node_ids, indptr = sub.node_ids, sub.indptr
    edge = 0
    hop_end = list(torch.cumsum(torch.tensor(sub.num_nodes_per_hop), 0).tolist())
    for local in range(indptr.numel() - 1):
        hop = next(h for h, end in enumerate(hop_end) if local < end)
        v = int(node_ids[local])
        got: dict[int, list[int]] = {}
        for e in range(int(indptr[local]), int(indptr[local + 1])):
            got.setdefault(int(sub.edge_types[e]), []).append(int(node_ids[sub.indices[e]]))
            edge += 1
        node_type = int(sub.node_types[local])
        for r, rel in enumerate(schema.relations):
            k = per_hop[hop][r]
            into = schema.type_index(rel.tail) == node_type
            full = _relation_neighbours(ds, v, r)
            picked = got.get(r, [])
            assert len(set(picked)) == len(picked) and set(picked) <= full, (keys[r], v)
            expected = 0 if not into or k == 0 else (len(full) if k < 0 else min(k, len(full)))
            assert len(picked) == expected, (keys[r], v, k)
    assert edge == sub.num_edges


@pytest.mark.skipif(not native_available(), reason=f"native ops not built: {unavailable_reason()}")
def test_native_and_torch_give_the_same_sample(prepared_acm):
    ds = prepared_acm
    torch.set_num_threads(2)  # the native passes split into chunks over threads (the fixture restores one)
    papers = torch.cat([ds.split(name) for name in ("train", "val", "test")])  # frontiers of several chunks
    for fanouts in (["10", "5"], ["paper-written_by-author:3,author-rev_written_by-paper:4", "-1"]):
        native, twin = _sampler(ds, fanouts, "native"), _sampler(ds, fanouts, "torch")
        for seeds, seed in ((ds.split("train"), 0), (ds.split("train"), 2**63 + 5), (papers, 1)):
            a, b = native.sample(seeds, seed=seed), twin.sample(seeds, seed=seed)
            for name in ("node_ids", "indptr", "indices", "edge_types", "node_types"):
                assert torch.equal(getattr(a, name), getattr(b, name)), name
            assert a.num_nodes_per_hop == b.num_nodes_per_hop and a.num_edges_per_hop == b.num_edges_per_hop


@pytest.mark.parametrize("backend", BACKENDS)
def test_relation_blocks_partition_each_layer(hetero_dataset, backend):
    sub = _sampler(hetero_dataset, ["-1", "-1"], backend).sample(hetero_dataset.split("train"), seed=1)
    for layer in range(sub.num_layers):
        block = sub.block(layer)
        parts = sub.relation_blocks(layer)
        assert sum(p.num_edges for p in parts) == block.num_edges
        whole = {tuple(e) for e in block.edge_index().t().tolist()}
        assert set().union(*({tuple(e) for e in p.edge_index().t().tolist()} for p in parts)) == whole


@pytest.mark.parametrize(
    ("fanouts", "message"),
    [
        (["paper-wrote-author:2"], "unknown relation 'paper-wrote-author'"),
        (["paper-cites-paper:x"], "fanout 'x' of paper-cites-paper is not an int"),
        (["0"], "fanout 0 is invalid"),
        (["paper-cites-paper:5,paper-cites-paper:3"], "relation paper-cites-paper is named twice"),
        ([], "at least one hop"),
    ],
)
def test_bad_fanouts_say_what_and_where(hetero_dataset, fanouts, message):
    with pytest.raises(SamplingError, match=message.replace("(", r"\(")):
        _sampler(hetero_dataset, fanouts, "torch")


def test_bad_seeds_are_refused(hetero_dataset):
    sampler = _sampler(hetero_dataset, ["2"], "auto")
    with pytest.raises(SamplingError, match="out of range"):
        sampler.sample(torch.tensor([0, 99]), seed=0)
    with pytest.raises(SamplingError, match="more than once"):
        sampler.sample(torch.tensor([3, 3]), seed=0)
