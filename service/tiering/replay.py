"""Replay sampled training epochs and count how often each node's feature row is read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from graphtier.contract.errors import SamplingError
from graphtier.service.graph.csc import CSCGraph


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
    """Sample every epoch's shuffled train ids in batches; every sampled node is one row read.
    `observe(node_ids)` sees every batch's sampled nodes, in order."""
    from graphtier.service.sampling import NeighborSampler

    if train_ids.numel() == 0:
        raise SamplingError("the dataset has no training ids to start sampling from")
    if batch_size < 1 or epochs < 1:
        raise SamplingError(f"batch size and epochs must be >= 1, got {batch_size} and {epochs}")
    sampler = NeighborSampler(graph, fanouts)
    counts = torch.zeros(graph.num_nodes, dtype=torch.int64)
    generator = torch.Generator().manual_seed(seed)
    batches_per_epoch = (train_ids.numel() + batch_size - 1) // batch_size
    total_batches = epochs * batches_per_epoch
    done = 0
    for _ in range(epochs):
        order = train_ids[torch.randperm(train_ids.numel(), generator=generator)]
        for batch in order.split(batch_size):
            sub = sampler.sample(batch, seed=seed * 1_000_003 + done)
            counts.index_add_(0, sub.node_ids, torch.ones_like(sub.node_ids))
            if observe:
                observe(sub.node_ids)
            done += 1
            if on_batch:
                on_batch(done, total_batches)
    return AccessReplay(counts=counts, epochs=epochs, batches=done)
