"""Heterogeneous batches through a producer channel: per-type tiers of ACM, slots read in place, equal to in-process
batches (node batches and a target relation's link batches)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches
from graphtier.launcher.runtime.hetero_link import HeteroLinkBatches
from graphtier.service.pipeline import ChannelReader, ProducerConfig, spawn_producer
from graphtier.service.pipeline.config import LinkBatches
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.store import SharedDatasetStore
from graphtier.service.tiering.hetero import featured_bytes, hetero_plans, split_budget

FANOUTS = ["author-rev_written_by-paper:5,subject-rev_has_subject-paper:3", "4"]


@pytest.fixture
def channel_dir():
    path = Path(tempfile.mkdtemp(prefix="gtty-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_hetero_plans_split_one_budget_per_tier_by_score(prepared_acm):
    schema = prepared_acm.manifest.hetero
    total = featured_bytes(schema)
    budgets = TierBudgets(device_replicated_bytes=total // 20, num_devices=1, host_bytes=total // 2)
    plans = hetero_plans(schema, prepared_acm.scores, budgets)
    assert sorted(plans) == [t.name for t in schema.node_types if not t.featureless]  # featureless: no rows to tier
    replicated = split_budget(schema, prepared_acm.scores, total // 20)
    for name, plan in plans.items():
        info = schema.type_named(name)
        assert (plan.num_nodes, plan.row_bytes) == (info.count, info.row_bytes)
        assert plan.replicated_end == replicated.rows[name]
        assert 0 < plan.replicated_end <= plan.host_end < plan.num_nodes  # every tier holds rows of ACM's papers
    assert sum(p.replicated_end * p.row_bytes for p in plans.values()) <= total // 20


def test_hetero_channel_batches_equal_in_process_batches(prepared_acm, channel_dir):
    """A heterogeneous producer's slots hold the batches `HeteroLocalBatches` draws for the same seed, epoch,
    rank and step (both follow the epoch plan); rows come from replicated, host and storage tiers of
    the paper type."""
    schema = prepared_acm.manifest.hetero
    total = featured_bytes(schema)
    budgets = TierBudgets(device_replicated_bytes=total // 20, num_devices=1, host_bytes=total // 2)
    plans = hetero_plans(schema, prepared_acm.scores, budgets)
    structure = PlacementPlan(
        num_nodes=schema.num_nodes, row_bytes=0, num_devices=1, replicated_end=0, interleaved_end=0,
        host_end=schema.num_nodes,
    )  # fmt: skip
    local = HeteroLocalBatches(prepared_acm, FANOUTS, 16, rank=1, world_size=2, seed=3)
    with SharedDatasetStore(prepared_acm, structure, hetero_plans=plans) as store:
        config = ProducerConfig(
            dataset=store.handle, rank=1, world_size=2, fanouts=[5, 4], relation_fanouts=FANOUTS, batch_size=16,
            epochs=1, seed=3, channel_dir=channel_dir, num_threads=1, heartbeat_interval_s=0.05,
        )  # fmt: skip
        with spawn_producer(config) as producer, ChannelReader(producer.layout, timeout=20) as reader:
            batches = 0
            for batch, expected in zip(reader.epoch(), local.epoch(0), strict=True):
                assert batch.is_hetero and batch.slot is not None
                assert torch.equal(batch.seeds, expected.seeds) and batch.sample_seed == expected.sample_seed
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
        assert batches == reader.layout.steps_per_epoch == local.steps_per_epoch() == 2  # 60 train papers, 2 ranks
        traffic = stats.traffic
        assert traffic.replicated.rows and traffic.host.rows and traffic.storage.rows and traffic.simulated


def _whole_graph_on_the_host(dataset):
    """(structure plan, heterogeneous plans) placing every row of `dataset` on the host tier."""
    schema = dataset.manifest.hetero
    budgets = TierBudgets(device_replicated_bytes=0, num_devices=1, host_bytes=featured_bytes(schema))
    structure = PlacementPlan(
        num_nodes=schema.num_nodes, row_bytes=0, num_devices=1, replicated_end=0, interleaved_end=0,
        host_end=schema.num_nodes,
    )  # fmt: skip
    return structure, hetero_plans(schema, dataset.scores, budgets)


def test_hetero_link_channel_batches_equal_in_process_batches(acm_link, channel_dir):
    """A heterogeneous link job's producer and `HeteroLinkBatches` draw the same batches for the same seed,
    epoch, rank and step: the epoch plan's train edges, the same negatives, the same sample."""
    fanouts = ["4", "3"]
    local = HeteroLinkBatches(acm_link, fanouts, 512, rank=0, world_size=3, seed=9, negatives=2)
    structure, plans = _whole_graph_on_the_host(acm_link)
    with SharedDatasetStore(acm_link, structure, hetero_plans=plans) as store:
        config = ProducerConfig(
            dataset=store.handle, rank=0, world_size=3, fanouts=[4, 3], relation_fanouts=fanouts, batch_size=512,
            epochs=2, seed=9, channel_dir=channel_dir, num_threads=1, heartbeat_interval_s=0.05,
            link=LinkBatches(negatives=2, negative_sampling="corrupt-tail"),
        )  # fmt: skip
        with spawn_producer(config) as producer, ChannelReader(producer.layout, timeout=20) as reader:
            assert reader.layout.steps_per_epoch == local.link_steps_per_epoch()
            for epoch in range(2):
                batches = 0
                for batch, expected in zip(reader.epoch(), local.pairs_epoch(epoch), strict=True):
                    assert torch.equal(batch.seeds, expected.batch.seeds)
                    assert batch.sample_seed == expected.batch.sample_seed
                    assert batch.num_positive == expected.num_positive
                    assert batch.pairs is not None and torch.equal(batch.pairs, expected.pairs)
                    got, want = batch.subgraph, expected.batch.subgraph
                    for name in ("node_ids", "indptr", "indices", "edge_types", "node_types"):
                        assert torch.equal(getattr(got, name), getattr(want, name)), name
                    assert torch.equal(batch.x["paper"], expected.batch.x["paper"])
                    batches += 1
                assert batches == local.link_steps_per_epoch()
