"""The train loop's view of a mini-batch: `Batch` (graphtier.service.pipeline.batch), read out of
the producer channel or sampled in-process by `LocalBatchSource`; `batch.to(device)` puts it on
the rank's device (the loader API calls that a `DeviceBatch`). `release()` is called once the
optimizer step no longer needs the batch's memory, so a producer may refill that slot.
"""

from __future__ import annotations

from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.service.pipeline.batch import Batch, blocks_to

DeviceBatch = Batch  # a batch on the rank's device, as `batch.to(device)` returns it

__all__ = ["Batch", "DeviceBatch", "blocks_to", "seed_logits"]


def seed_logits(logits: Tensor, num_seeds: int) -> Tensor:
    """The seeds' rows of a model's output: all of it from a block model, the first `num_seeds`
    rows from a model that computes every sampled node (PyG style)."""
    if logits.dim() != 2 or logits.shape[0] < num_seeds:
        raise GraphtierError(
            f"the model returned logits of shape {tuple(logits.shape)} for a batch of {num_seeds} seeds; "
            f"it must return [num_seeds or more, num_classes]"
        )
    return logits[:num_seeds]
