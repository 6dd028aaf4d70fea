"""Replay sampled training epochs and count how often each node's feature row is read.

The epochs are a one-rank job's, batch for batch: its `EpochPlan` (graphtier.service.pipeline.
epoch_plan) shuffles and cuts the train ids and seeds each batch's sample as a producer does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from graphtier.contract.errors import SamplingError
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.pipeline.epoch_plan import EpochPlan


@dataclass(frozen=True)
class AccessReplay:
    """Per-node feature-row reads over `epochs` epochs of mini-batches."""

    counts: torch.Tensor  # int64 [N]
    epochs: int
    batches: int

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def replay_access_counts(
    graph: CSCGraph,
    train_ids: torch.Tensor,
    *,
    fanouts: Sequence[int],
    batch_size: int,
    epochs: int,
    seed: int = 0,
    on_batch: Callable[[int, int], None] | None = None,
    observe: Callable[[torch.Tensor], None] | None = None,
) -> AccessReplay:
    """Sample every epoch's batches of a one-rank job; every sampled node is one row read.
    `observe(node_ids)` sees every batch's sampled nodes, in order."""
    from graphtier.service.sampling import NeighborSampler

    plan = one_rank_plan(train_ids, batch_size, epochs, seed)
    sampler = NeighborSampler(graph, fanouts)
    counts = torch.zeros(graph.num_nodes, dtype=torch.int64)
    total_batches = epochs * plan.steps_per_epoch
    done = 0
    for epoch in range(epochs):
        for _, seeds, sample_seed in plan.batches(train_ids, epoch):
            sub = sampler.sample(seeds, seed=sample_seed)
            counts.index_add_(0, sub.node_ids, torch.ones_like(sub.node_ids))
            if observe:
                observe(sub.node_ids)
            done += 1
            if on_batch:
                on_batch(done, total_batches)
    return AccessReplay(counts=counts, epochs=epochs, batches=done)


def one_rank_plan(train_ids: torch.Tensor, batch_size: int, epochs: int, seed: int) -> EpochPlan:
    """The epoch plan of a one-rank job over `train_ids`; SamplingError for no ids or a bad size."""
    if train_ids.numel() == 0:
        raise SamplingError("the dataset has no training ids to start sampling from")
    if batch_size < 1 or epochs < 1:
        raise SamplingError(f"batch size and epochs must be >= 1, got {batch_size} and {epochs}")
    return EpochPlan(train_ids.numel(), batch_size, seed)
