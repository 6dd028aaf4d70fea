"""LocalBatchSource: disjoint shards of the train ids with equal step counts (the epoch plan's; that
they are a producer's batches: tests/service/pipeline/test_pipeline_channel.py), batches whose
features, labels and blocks are the dataset's own, deterministic epochs."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import GraphtierError, SamplingError
from graphtier.launcher.runtime import Batch, LocalBatchSource


def test_train_shards_split_the_train_ids_with_equal_lengths(small_rmat):
    train = small_rmat.split("train")
    for world in (1, 3, 4):
        shards = [LocalBatchSource(small_rmat, [5], 64, r, world, seed=1).train_shard(epoch=2) for r in range(world)]
        assert {s.numel() for s in shards} == {train.numel() // world}  # the epoch plan drops T mod W ids
        together = torch.cat(shards)
        assert together.unique().numel() == together.numel() and bool(torch.isin(together, train).all())
    a = LocalBatchSource(small_rmat, [5], 64, 0, 2, seed=1)
    assert torch.equal(a.train_shard(0), LocalBatchSource(small_rmat, [5], 64, 0, 2, seed=1).train_shard(0))
    assert not torch.equal(a.train_shard(0), a.train_shard(1))


def test_eval_shards_partition_the_split(small_rmat):
    shards = [LocalBatchSource(small_rmat, [5], 64, r, 3).eval_shard("val") for r in range(3)]
    merged = torch.cat(shards).sort().values
    assert torch.equal(merged, small_rmat.split("val").sort().values)


def test_batches_carry_the_datasets_features_labels_and_blocks(small_rmat):
    source = LocalBatchSource(small_rmat, [6, 3], 100, seed=4)
    batches = list(source.epoch_batches(0))
    assert len(batches) == source.num_train_batches() == -(-small_rmat.split("train").numel() // 100)  # 1 rank
    features, labels = small_rmat.features, small_rmat.labels
    for batch in batches:
        assert isinstance(batch, Batch)
        assert torch.equal(batch.x, features[batch.node_ids])
        assert torch.equal(batch.y, labels[batch.seeds])
        assert len(batch.blocks) == 2 and batch.blocks[0].num_src == batch.x.shape[0]
        assert batch.blocks[-1].num_dst == batch.y.numel()
    assert source.traffic.total_rows == sum(b.x.shape[0] for b in batches)
    assert source.traffic.host.rows == source.traffic.total_rows  # a prepared dataset reads host rows only
    again = list(source.epoch_batches(0))
    assert all(torch.equal(a.node_ids, b.node_ids) for a, b in zip(batches, again, strict=True))


def test_eval_fanouts_and_bad_arguments(small_rmat):
    source = LocalBatchSource(small_rmat, [2], 500, eval_fanouts=[-1])
    batch = next(source.eval_batches("test"))
    indptr = batch.blocks[0].indptr
    degrees = small_rmat.graph.colptr[batch.seeds + 1] - small_rmat.graph.colptr[batch.seeds]
    assert torch.equal(indptr[1:] - indptr[:-1], degrees)  # full neighbourhoods for evaluation
    with pytest.raises(GraphtierError, match="batch_size must be an int >= 1"):
        LocalBatchSource(small_rmat, [2], 0)
    with pytest.raises(GraphtierError, match="0 <= rank < world_size"):
        LocalBatchSource(small_rmat, [2], 8, rank=2, world_size=2)
    with pytest.raises(GraphtierError, match="as many hops"):
        LocalBatchSource(small_rmat, [2, 2], 8, eval_fanouts=[-1])
    with pytest.raises(SamplingError, match="fanout 0 for hop 1"):
        LocalBatchSource(small_rmat, [0], 8)
    with pytest.raises(GraphtierError, match="no 'holdout' split"):
        source.split_ids("holdout")
    train = small_rmat.split("train").numel()
    crowded = LocalBatchSource(small_rmat, [2], 8, rank=0, world_size=train + 1)
    with pytest.raises(SamplingError, match=rf"rmat12': {train} train ids cannot be shared by {train + 1} ranks"):
        crowded.num_train_batches()
    assert next(crowded.eval_batches("test")).seeds.numel() >= 1  # evaluation needs no train seed
