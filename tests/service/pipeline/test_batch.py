"""One `Batch` for every graph: heterogeneous parts are per-type dicts on the same type, moved alike."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.pipeline.batch import Batch
from graphtier.service.sampling import SampledSubgraph


def _sample(hetero: bool, pairs: bool = False) -> SampledSubgraph:
    """Seed 0 with neighbours 1 and 2 (one hop); of relations 0 and 1 and node types 0, 1, 1 when hetero."""
    return SampledSubgraph(
        node_ids=torch.tensor([10, 11, 12]),
        indptr=torch.tensor([0, 2]),
        indices=torch.tensor([1, 2]),
        num_nodes_per_hop=[1, 2],
        num_edges_per_hop=[2],
        edge_types=torch.tensor([0, 1]) if hetero else None,
        node_types=torch.tensor([0, 1, 1]) if hetero else None,
        num_relations=2 if hetero else 0,
        pairs=torch.tensor([[0, 0]]) if pairs else None,
        num_positive=1 if pairs else 0,
    )


def test_a_heterogeneous_batch_is_a_batch_with_per_type_rows_and_relation_blocks():
    x = {"paper": torch.ones(1, 4), "author": torch.zeros(2, 3)}
    batch = Batch(subgraph=_sample(True), x=x, y=torch.tensor([1]), traffic=TrafficCounts())
    assert batch.is_hetero and batch.x is x and batch.num_seeds == 1
    assert [t.tolist() for t in batch.edge_types] == [[0, 1]]
    ids, types = batch.input_nodes
    assert ids.tolist() == [10, 11, 12] and types.tolist() == [0, 1, 1]
    first, second = batch.relation_blocks(0)
    assert first.indices.tolist() == [1] and second.indices.tolist() == [2]


def test_a_batch_of_one_node_type_says_it_has_no_relations():
    batch = Batch(subgraph=_sample(False), x=torch.ones(3, 4), y=torch.tensor([1]), traffic=TrafficCounts())
    assert not batch.is_hetero and batch.pairs is None
    for part in ("edge_types", "node_types"):
        with pytest.raises(GraphtierError, match=f"one node type: it has no {part}"):
            getattr(batch, part)
    with pytest.raises(GraphtierError, match="one node type"):
        batch.relation_blocks(0)


def test_moving_a_batch_moves_every_part_and_releasing_the_copy_releases_it():
    released = []
    x = {"paper": torch.ones(1, 4)}
    batch = Batch(
        subgraph=_sample(True, pairs=True),
        x=x,
        y=torch.tensor([1]),
        traffic=TrafficCounts(),
        _release=lambda b: released.append(b),
    )
    assert batch.to(torch.device("cpu")) is batch  # already there: no copy
    meta = torch.device("meta")
    moved = batch.to(meta)
    assert moved is not batch and moved.y.device == meta and moved.x["paper"].device == meta
    for part in ("node_ids", "indptr", "indices", "edge_types", "node_types", "pairs"):
        assert getattr(moved.subgraph, part).device == meta, part
    assert moved.blocks[0].indptr.device == meta and moved.pairs is not None and moved.num_positive == 1
    moved.release()
    assert released == [batch]
