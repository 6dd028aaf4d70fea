"""Accuracy of a model on the seed nodes of evaluation batches, summed over all ranks.

Every rank evaluates its own shard of a split's ids (shards partition the split), counts
correct and labelled seeds, and the counts are all-reduced, so the accuracy is that of the
whole split whatever the number of ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.service.pipeline.batch import Batch

EvalBatches = Callable[[str], Iterable[Batch]]
Forward = Callable[[nn.Module, Batch], Tensor]


def seed_logits(logits: Tensor, num_seeds: int) -> Tensor:
    """The seeds' rows of a model's output: all of it from a block model, the first `num_seeds`
    rows from a model that computes every sampled node (PyG style)."""
    if logits.dim() != 2 or logits.shape[0] < num_seeds:
        raise GraphtierError(
            f"the model returned logits of shape {tuple(logits.shape)} for a batch of {num_seeds} seeds; "
            f"it must return [num_seeds or more, num_classes]"
        )
    return logits[:num_seeds]


def block_forward(model: nn.Module, batch: Batch) -> Tensor:
    """The built-in models' call: `model(blocks, x)` -> [num_seeds, num_classes]."""
    return model(batch.blocks, batch.x)


@torch.no_grad()
def count_correct(
    model: nn.Module, batches: Iterable[Batch], device: torch.device, forward: Forward | None = None
) -> tuple[int, int]:
    """(correct, labelled) seeds over `batches`; releases every batch. `forward(model, batch)`
    computes the logits (default `model(blocks, x)`); rows past the seeds are ignored."""
    correct = labelled = 0
    for batch in batches:
        try:
            on_device = batch.to(device)
            logits = seed_logits((forward or block_forward)(model, on_device), on_device.num_seeds)
            y = on_device.y
            mask = y >= 0
            correct += int((logits.argmax(dim=1) == y)[mask].sum())
            labelled += int(mask.sum())
        finally:
            batch.release()
    return correct, labelled


def evaluate_splits(
    model: nn.Module, eval_batches: EvalBatches, splits: Sequence[str], ctx: DistContext, forward: Forward | None = None
) -> dict[str, float]:
    """split -> accuracy over all ranks (splits with no labelled seed anywhere are left out).

    Every rank must call this (it all-reduces); a DDP wrapper is looked through (its forward
    would synchronise buffers with ranks that hold other numbers of batches); the model is put
    back in training mode after.
    """
    if isinstance(model, DistributedDataParallel):
        model = model.module
    was_training = model.training
    model.eval()
    try:
        counts = torch.zeros(len(splits), 2, dtype=torch.float64, device=ctx.device)
        for i, split in enumerate(splits):
            counts[i, 0], counts[i, 1] = count_correct(model, eval_batches(split), ctx.device, forward)
        ctx.all_reduce_sum(counts)
    finally:
        model.train(was_training)
    return {split: float(c / n) for split, (c, n) in zip(splits, counts.tolist(), strict=True) if n > 0}
