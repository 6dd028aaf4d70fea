"""Typed batches through a producer channel: per-type tiers of ACM, slots read in place, equal to in-process batches."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from graphtier.launcher.runtime.typed_batches import TypedLocalBatches
from graphtier.service.pipeline import ChannelReader, ProducerConfig, spawn_producer
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.store import SharedDatasetStore
from graphtier.service.tiering.hetero import featured_bytes, split_budget, typed_plans

FANOUTS = ["author-rev_written_by-paper:5,subject-rev_has_subject-paper:3", "4"]


@pytest.fixture
def channel_dir():
    path = Path(tempfile.mkdtemp(prefix="gtty-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_typed_plans_split_one_budget_per_tier_by_score(prepared_acm):
    schema = prepared_acm.manifest.hetero
    total = featured_bytes(schema)
    budgets = TierBudgets(device_replicated_bytes=total // 20, num_devices=1, host_bytes=total // 2)
    plans = typed_plans(schema, prepared_acm.scores, budgets)
    assert sorted(plans) == [t.name for t in schema.node_types if not t.featureless]  # featureless: no rows to tier
    replicated = split_budget(schema, prepared_acm.scores, total // 20)
    for name, plan in plans.items():
        info = schema.type_named(name)
        assert (plan.num_nodes, plan.row_bytes) == (info.count, info.row_bytes)
        assert plan.replicated_end == replicated.rows[name]
        assert 0 < plan.replicated_end <= plan.host_end < plan.num_nodes  # every tier holds rows of ACM's papers
    assert sum(p.replicated_end * p.row_bytes for p in plans.values()) <= total // 20


def test_typed_channel_batches_equal_in_process_batches(prepared_acm, channel_dir):
    """A typed producer's slots hold what `TypedLocalBatches` samples and reads for the same seeds and
    sample seed; rows come from replicated, host and storage tiers of the paper type."""
    schema = prepared_acm.manifest.hetero
    total = featured_bytes(schema)
    budgets = TierBudgets(device_replicated_bytes=total // 20, num_devices=1, host_bytes=total // 2)
    plans = typed_plans(schema, prepared_acm.scores, budgets)
    structure = PlacementPlan(
        num_nodes=schema.num_nodes, row_bytes=0, num_devices=1, replicated_end=0, interleaved_end=0,
        host_end=schema.num_nodes,
    )  # fmt: skip
    local = TypedLocalBatches(prepared_acm, FANOUTS, 16)
    with SharedDatasetStore(prepared_acm, structure, typed_plans=plans) as store:
        config = ProducerConfig(
            dataset=store.handle, rank=0, world_size=2, fanouts=[5, 4], relation_fanouts=FANOUTS, batch_size=16,
            epochs=1, seed=3, channel_dir=channel_dir, num_threads=1, heartbeat_interval_s=0.05,
        )  # fmt: skip
        with spawn_producer(config) as producer, ChannelReader(producer.layout, timeout=20) as reader:
            batches = 0
            for batch in reader.epoch():
                assert batch.hetero and batch.slot is not None
                expected = local.batch_for(batch.seeds, batch.sample_seed)
                got, want = batch.subgraph, expected.subgraph
                for name in ("node_ids", "indptr", "indices", "edge_types", "node_types"):
                    assert torch.equal(getattr(got, name), getattr(want, name)), name
                assert got.num_nodes_per_hop == want.num_nodes_per_hop and got.num_relations == len(schema.relations)
                assert sorted(batch.x) == ["paper"]  # authors and subjects are learned
                assert torch.equal(batch.x["paper"], expected.x["paper"])
                assert torch.equal(batch.y, prepared_acm.labels[batch.seeds])
                assert batch.traffic.total_rows == batch.x["paper"].shape[0]
                blocks = batch.relation_blocks(0)
                assert sum(b.num_edges for b in blocks) == batch.blocks[0].num_edges
                batches += 1
            stats = reader.stats()
        assert batches == reader.layout.steps_per_epoch == 2  # 60 train papers over 2 ranks, 16 per batch
        traffic = stats.traffic
        assert traffic.replicated.rows and traffic.host.rows and traffic.storage.rows and traffic.simulated
