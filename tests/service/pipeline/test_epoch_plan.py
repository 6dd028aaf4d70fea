"""The epoch plan: each rank's shard, its batches, their sample seeds, evaluation shards, and refusals."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import SamplingError
from graphtier.service.pipeline.epoch_plan import EpochPlan, dropout_seed, eval_batches, eval_shard


def test_shards_are_equal_disjoint_and_the_same_permutation_on_every_rank():
    train = torch.arange(1000, 1103)  # 103 ids over 4 ranks: 25 each, 3 dropped
    plans = [EpochPlan(103, 10, seed=5, rank=r, world_size=4) for r in range(4)]
    shards = [plan.shard(train, epoch=2) for plan in plans]
    assert [s.numel() for s in shards] == [25] * 4
    together = torch.cat(shards)
    assert together.unique().numel() == 100 and bool(torch.isin(together, train).all())
    assert torch.equal(EpochPlan(103, 10, seed=5, rank=1, world_size=4).shard(train, 2), shards[1])  # any process
    assert not torch.equal(plans[1].shard(train, epoch=3), shards[1])
    assert plans[0].steps_per_epoch == 3  # 25 seeds -> batches of 10, 10, 5


def test_the_dropped_tail_changes_every_epoch():
    train = torch.arange(103)
    plans = [EpochPlan(103, 64, seed=1, rank=r, world_size=4) for r in range(4)]
    dropped = []
    for epoch in range(6):
        kept = set(torch.cat([p.shard(train, epoch) for p in plans]).tolist())
        dropped.append(set(range(103)) - kept)
    assert all(len(d) == 3 for d in dropped) and len(set(map(frozenset, dropped))) == 6
    assert set().union(*[set(range(103)) - d for d in dropped]) == set(range(103))  # none left out for good


def test_batches_cut_the_shard_in_order_with_one_sample_seed_each():
    train = torch.arange(500, 551)  # 51 ids over 2 ranks: 25 each
    plan = EpochPlan(51, 10, seed=7, rank=1, world_size=2)
    batches = list(plan.batches(train, epoch=4))
    assert [b.step for b in batches] == [0, 1, 2] and [b.seeds.numel() for b in batches] == [10, 10, 5]
    assert torch.equal(torch.cat([b.seeds for b in batches]), plan.shard(train, epoch=4))
    assert [b.sample_seed for b in batches] == [plan.sample_seed(4, s) for s in range(3)]
    other_rank = EpochPlan(51, 10, seed=7, rank=0, world_size=2)
    seeds = {plan.sample_seed(e, s) for e in range(3) for s in range(3)}
    seeds |= {other_rank.sample_seed(e, s) for e in range(3) for s in range(3)}
    assert len(seeds) == 18 and all(0 <= s < 2**63 for s in seeds)  # one per (epoch, rank, step)


def test_evaluation_shards_partition_a_split_exactly():
    ids = torch.arange(100, 131)
    shards = [eval_shard(ids, rank=r, world_size=3) for r in range(3)]
    assert torch.equal(torch.cat(shards).sort().values, ids)
    batches = list(eval_batches(ids, 4, seed=2, rank=1, world_size=3))
    assert torch.equal(torch.cat([b.seeds for b in batches]), shards[1]) and [b.step for b in batches] == [0, 1, 2]
    train = {EpochPlan(31, 4, seed=2, rank=1, world_size=3).sample_seed(0, s) for s in range(3)}
    assert not train & {b.sample_seed for b in batches}  # the evaluation's stream is its own
    assert len({dropout_seed(2, rank, 0) for rank in range(4)}) == 4  # ranks drop different units


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_train": 3, "batch_size": 8, "world_size": 4}, "3 train seeds cannot be shared by 4 ranks.*at most 3"),
        ({"num_train": 0, "batch_size": 8}, "no train seeds to train on"),
        ({"num_train": 10, "batch_size": 0}, "batch_size must be an int >= 1, got 0"),
        ({"num_train": 10, "batch_size": 8, "rank": 2, "world_size": 2}, "0 <= rank < world_size, got rank=2"),
    ],
)
def test_a_plan_no_rank_could_follow_is_refused(arguments, message):
    with pytest.raises(SamplingError, match=message):
        EpochPlan(**arguments)
